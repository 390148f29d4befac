#include "learner/window_batch.h"

#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <utility>

#include "common/support/errors.h"

namespace kvrl {

namespace {

// The tokens an episode or fragment takes: its context prefix, its steps and its final
// observation.
int64_t tokens_of(const Episode& e) { return e.context_length() + e.length() + 1; }

// The row width: the most tokens any episode takes.
int64_t window_width(const std::vector<Episode>& episodes, int64_t max_tokens) {
  if (episodes.empty()) throw InvalidArgumentError("pack_windows needs at least one episode");
  const int64_t obs_size = episodes.front().observation_size;
  const int64_t act_size = episodes.front().action_size;
  const ObservationElement element = episodes.front().observations.element();
  int64_t width = 0;
  for (const auto& e : episodes) {
    if (e.observation_size != obs_size || e.action_size != act_size) {
      throw InvalidArgumentError("pack_windows: episodes of different observation or action sizes");
    }
    for (const ObservationValues* values : {&e.observations, &e.final_observation, &e.context_observations}) {
      if (!values->empty() && values->element() != element) {
        throw InvalidArgumentError("pack_windows: episodes of different observation elements (" +
                                   element_name(element) + " and " + element_name(values->element()) + ")");
      }
    }
    if (tokens_of(e) > max_tokens) {
      throw InvalidArgumentError("pack_windows: an episode of " + std::to_string(e.length()) +
                                 " steps and a context prefix of " + std::to_string(e.context_length()) +
                                 " needs " + std::to_string(tokens_of(e)) + " tokens, more than the limit (" +
                                 std::to_string(max_tokens) + ")");
    }
    width = std::max(width, tokens_of(e));
  }
  return width;
}

// First-fit decreasing into rows `width` wide: each episode's slot, and each row's tokens.
std::vector<EpisodeSlot> place_episodes(const std::vector<Episode>& episodes, int64_t width,
                                        std::vector<int64_t>& row_used) {
  std::vector<size_t> order(episodes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return tokens_of(episodes[a]) > tokens_of(episodes[b]); });
  std::vector<EpisodeSlot> slots(episodes.size());
  for (size_t index : order) {
    const int64_t tokens = tokens_of(episodes[index]);
    size_t row = 0;
    while (row < row_used.size() && row_used[row] + tokens > width) ++row;
    if (row == row_used.size()) row_used.push_back(0);
    const Episode& e = episodes[index];
    slots[index] = {static_cast<int64_t>(row), row_used[row] + e.context_length(), e.length(),
                    e.context_length(), static_cast<bool>(e.terminated.back())};
    row_used[row] += tokens;
  }
  return slots;
}

// Copies episode `e`, its context prefix first, into its slot of the batch's host tensors.
void copy_into_slot(const Episode& e, const EpisodeSlot& slot, int64_t width, WindowBatch& batch) {
  const int64_t obs_size = e.observation_size;
  const int64_t act_size = e.action_size;
  const int64_t base = slot.row * width + slot.offset;
  // Observations are copied as stored (float32 or uint8): `obs` addresses bytes.
  auto* obs = static_cast<uint8_t*>(batch.observations.data_ptr());
  const int64_t obs_bytes = obs_size * static_cast<int64_t>(batch.observations.element_size());
  bool* init = batch.is_init.data_ptr<bool>();
  if (slot.context > 0) {
    std::memcpy(obs + (base - slot.context) * obs_bytes, e.context_observations.data(),
                e.context_observations.byte_size());
    // The prefix starts where the actor's context started, or reach steps before the
    // fragment, after which nothing that came earlier changes the trained steps.
    for (int64_t t = 0; t < slot.context; ++t) init[base - slot.context + t] = t == 0;
  }
  std::memcpy(obs + base * obs_bytes, e.observations.data(), e.observations.byte_size());
  std::memcpy(obs + (base + e.length()) * obs_bytes, e.final_observation.data(),
              e.final_observation.byte_size());
  std::memcpy(batch.actions.data_ptr<float>() + base * act_size, e.actions.data(),
              e.actions.size() * sizeof(float));
  bool* mask = batch.step_mask.data_ptr<bool>();
  float* reward = batch.rewards.data_ptr<float>();
  float* logp = batch.behaviour_log_probs.data_ptr<float>();
  float* value = batch.behaviour_values.data_ptr<float>();
  int64_t* version = batch.policy_versions.data_ptr<int64_t>();
  // Contexts start where the actor's did; the final token continues the last one.
  for (int64_t t = 0; t < e.length(); ++t)
    init[base + t] = (t == 0 && slot.context == 0) || e.is_init[t] != 0;
  init[base + e.length()] = false;
  for (int64_t t = 0; t < e.length(); ++t) {
    mask[base + t] = true;
    reward[base + t] = e.rewards[t];
    logp[base + t] = e.behaviour_log_probs[t];
    value[base + t] = e.values[t];
    version[base + t] = e.policy_versions[t];
  }
}

}  // namespace

at::ScalarType observation_scalar_type(ObservationElement element) {
  return element == ObservationElement::kUInt8 ? at::kByte : at::kFloat;
}

WindowBatch pack_windows(const std::vector<Episode>& episodes, int64_t max_tokens) {
  const int64_t width = window_width(episodes, max_tokens);
  std::vector<int64_t> row_used;
  std::vector<EpisodeSlot> slots = place_episodes(episodes, width, row_used);
  const int64_t rows = static_cast<int64_t>(row_used.size());
  const int64_t obs_size = episodes.front().observation_size;
  WindowBatch batch;
  batch.observations =
      at::zeros({rows, width, obs_size}, observation_scalar_type(episodes.front().observations.element()));
  batch.actions = at::zeros({rows, width, episodes.front().action_size});
  batch.is_init = at::ones({rows, width}, at::kBool);  // padding: each token its own segment
  batch.step_mask = at::zeros({rows, width}, at::kBool);
  batch.rewards = at::zeros({rows, width});
  batch.behaviour_log_probs = at::zeros({rows, width});
  batch.behaviour_values = at::zeros({rows, width});
  batch.policy_versions = at::full({rows, width}, -1, at::kLong);
  for (size_t i = 0; i < episodes.size(); ++i) copy_into_slot(episodes[i], slots[i], width, batch);
  batch.row_tokens = std::move(row_used);
  batch.row_steps.assign(batch.row_tokens.size(), 0);
  for (const EpisodeSlot& slot : slots) batch.row_steps[static_cast<size_t>(slot.row)] += slot.length;
  batch.slots = std::move(slots);
  return batch;
}

}  // namespace kvrl

namespace kvrl {

WindowRows::WindowRows(const WindowBatch& batch, at::Tensor host_index)
    : host_index_(std::move(host_index)), device_index_(host_index_.to(batch.step_mask.device())) {
  const auto rows = host_index_.accessor<int64_t, 1>();
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const auto row = static_cast<size_t>(rows[i]);
    width_ = std::max(width_, batch.row_tokens.at(row));
    steps_ += batch.row_steps.at(row);
  }
}

at::Tensor WindowRows::operator()(const at::Tensor& t) const {
  return t.index_select(0, device_index_).narrow(1, 0, width_);
}

WindowBatch WindowBatch::to(c10::Device device) && {
  WindowBatch moved = std::move(*this);
  if (moved.observations.device() == device) return moved;
  for (at::Tensor* tensor :
       {&moved.observations, &moved.actions, &moved.is_init, &moved.step_mask, &moved.rewards,
        &moved.behaviour_log_probs, &moved.behaviour_values, &moved.policy_versions}) {
    *tensor = tensor->to(device, /*non_blocking=*/false);
  }
  return moved;
}

}  // namespace kvrl
