// learner_targets_eval IN.pt OUT.pt: the learner's targets and PPO loss terms on tensors
// written by Python, for tests/learner/test_targets_against_torchrl.py. The episodes go
// through pack_windows like a real batch, so the bootstrap choice and the slot offsets
// are those of training.
#include <ATen/core/grad_mode.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/io/torch_file.h"
#include "common/model/actor_critic.h"
#include "common/wire/episode.h"
#include "learner/policy_losses.h"
#include "learner/window_batch.h"

namespace kvrl {
namespace {

using Dict = c10::impl::GenericDict;

const c10::IValue& entry(const Dict& dict, const std::string& key) {
  auto it = dict.find(key);
  if (it == dict.end()) throw std::runtime_error("input has no key '" + key + "'");
  return it->value();
}

at::Tensor tensor(const Dict& dict, const std::string& key) {
  return entry(dict, key).toTensor().to(at::kFloat);
}

std::vector<float> floats(const at::Tensor& t) {
  const at::Tensor flat = t.contiguous().to(at::kFloat).reshape(-1);
  return {flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel()};
}

// An episode with the payload's rewards and log-rhos (log pi = 0, so log mu = -log_rho);
// its observations do not matter here.
Episode episode_from(const Dict& spec) {
  Episode episode;
  episode.rewards = floats(tensor(spec, "rewards"));
  const auto length = static_cast<size_t>(episode.length());
  const bool terminated = entry(spec, "terminated").toBool();
  episode.observation_size = 1;
  episode.action_size = 1;
  episode.observations.assign(length, 0.0F);
  episode.actions.assign(length, 0.0F);
  episode.terminated.assign(length, 0);
  episode.truncated.assign(length, 0);
  episode.terminated.back() = terminated ? 1 : 0;
  episode.truncated.back() = terminated ? 0 : 1;
  episode.is_init.assign(length, 0);
  episode.is_init.front() = 1;
  episode.behaviour_log_probs = floats(-tensor(spec, "log_rhos"));
  episode.values.assign(length, 0.0F);
  episode.policy_versions.assign(length, 0);
  episode.final_observation = {0.0F};
  return episode;
}

ReturnOptions return_options(const Dict& input) {
  return ReturnOptions{entry(input, "gamma").toDouble(), entry(input, "gae_lambda").toDouble(),
                       entry(input, "reward_scale").toDouble(), entry(input, "rho_bar").toDouble(),
                       entry(input, "c_bar").toDouble()};
}

c10::List<at::Tensor> per_episode(const WindowBatch& batch, const at::Tensor& packed) {
  c10::List<at::Tensor> out;
  for (const EpisodeSlot& slot : batch.slots)
    out.push_back(packed[slot.row].narrow(0, slot.offset, slot.length));
  return out;
}

Dict episode_targets(const Dict& input) {
  std::vector<Episode> episodes;
  std::vector<at::Tensor> values;
  for (const c10::IValue& spec : entry(input, "episodes").toListRef()) {
    episodes.push_back(episode_from(spec.toGenericDict()));
    values.push_back(tensor(spec.toGenericDict(), "values"));  // [L + 1]: the final observation's last
  }
  const WindowBatch batch = pack_windows(episodes, entry(input, "max_tokens").toInt());
  at::Tensor packed_values = at::zeros_like(batch.rewards);
  for (size_t i = 0; i < episodes.size(); ++i) {
    const EpisodeSlot& slot = batch.slots[i];
    packed_values[slot.row].narrow(0, slot.offset, slot.length + 1).copy_(values[i]);
  }
  const ReturnOptions options = return_options(input);
  const at::Tensor advantages = episode_advantages(batch, packed_values, options);
  std::vector<std::vector<const EpisodeSlot*>> slots_of_row(static_cast<size_t>(batch.rows()));
  for (const EpisodeSlot& slot : batch.slots) slots_of_row[static_cast<size_t>(slot.row)].push_back(&slot);
  const WindowRows all_rows(batch, at::arange(batch.rows(), at::kLong));
  const VTraceRowTargets vtrace =
      vtrace_row_targets(batch, all_rows, all_rows(packed_values), at::zeros_like(all_rows(packed_values)),
                         slots_of_row, options);
  Dict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("advantages", per_episode(batch, advantages));
  out.insert("normalized_advantages", per_episode(batch, normalized_advantages(advantages, batch.step_mask)));
  out.insert("vtrace_vs", per_episode(batch, vtrace.vs));
  out.insert("vtrace_pg_advantages", per_episode(batch, vtrace.pg_advantages));
  out.insert("rows", batch.rows());
  return out;
}

Dict ppo_terms(const Dict& spec) {
  auto optional = [&](const std::string& key) {
    return spec.contains(key) ? tensor(spec, key) : at::Tensor();
  };
  const PpoTokens tokens{
      tensor(spec, "log_probs"),  tensor(spec, "anchor_log_probs"), optional("behaviour_weights"),
      tensor(spec, "advantages"), tensor(spec, "returns"),          tensor(spec, "values"),
      tensor(spec, "old_values"), tensor(spec, "entropy"),          entry(spec, "mask").toTensor()};
  const PpoLossTerms terms =
      ppo_loss_terms(tokens, entry(spec, "clip_epsilon").toDouble(), entry(spec, "value_clip").toDouble());
  Dict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("policy", terms.policy);
  out.insert("value", terms.value);
  out.insert("entropy", terms.entropy);
  out.insert("approx_kl", terms.approx_kl);
  out.insert("clip_fraction", terms.clip_fraction);
  return out;
}

// The policy head's log-probabilities and entropy for given head outputs: logits, or the
// Gaussian mean with the payload's log_std.
Dict policy_head_terms(const Dict& spec) {
  const at::Tensor policy = tensor(spec, "policy");  // [N, K]
  ActorCriticOptions options;
  options.transformer.input_size = 1;
  options.transformer.hidden_size = 4;
  options.transformer.num_heads = 1;
  options.transformer.max_seq_len = 2;
  options.discrete = entry(spec, "discrete").toBool();
  options.num_outputs = policy.size(-1);
  ActorCritic head(options);
  if (!options.discrete) {
    at::NoGradGuard no_grad;
    head.named_parameters()["log_std"].copy_(tensor(spec, "log_std"));
  }
  const PolicyWindow window{policy, at::zeros({policy.size(0)})};
  Dict out(c10::StringType::get(), c10::AnyType::get());
  out.insert("log_probs", head.log_prob(window, tensor(spec, "actions")).detach());
  out.insert("entropy", head.entropy(window).detach());
  return out;
}

}  // namespace
}  // namespace kvrl

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: learner_targets_eval IN.pt OUT.pt\n";
    return 2;
  }
  try {
    const auto input = kvrl::read_torch_file(argv[1]).toGenericDict();
    kvrl::Dict output(c10::StringType::get(), c10::AnyType::get());
    if (input.contains("episodes")) output.insert("episodes", kvrl::episode_targets(input));
    if (input.contains("ppo")) output.insert("ppo", kvrl::ppo_terms(input.at("ppo").toGenericDict()));
    if (input.contains("policy_head")) {
      output.insert("policy_head", kvrl::policy_head_terms(input.at("policy_head").toGenericDict()));
    }
    kvrl::write_torch_file(argv[2], output);
  } catch (const std::exception& error) {
    std::cerr << "learner_targets_eval: " << error.what() << "\n";
    return 1;
  }
  return 0;
}
