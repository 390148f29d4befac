#include "learner/learner.h"

#include <ATen/ops/randperm.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/errors.h"
#include "learner/returns.h"
#include "learner/window_batch.h"

namespace kvrl {
namespace {

void validate(const LearnerOptions& o) {
  auto fail = [](const std::string& message) { throw InvalidArgumentError("learner." + message); };
  if (o.algorithm != "ppo" && o.algorithm != "vtrace") fail("algorithm (" + o.algorithm + ") must be ppo or vtrace");
  if (o.lr_schedule != "constant" && o.lr_schedule != "linear") {
    fail("lr_schedule (" + o.lr_schedule + ") must be constant or linear");
  }
  if (!(o.learning_rate > 0)) fail("learning_rate must be > 0");
  if (!(o.gamma >= 0 && o.gamma <= 1)) fail("gamma must be in [0, 1]");
  if (!(o.reward_scale > 0)) fail("reward_scale must be > 0");
  if (!(o.gae_lambda >= 0 && o.gae_lambda <= 1)) fail("gae_lambda must be in [0, 1]");
  if (!(o.clip_epsilon > 0)) fail("clip_epsilon must be > 0");
  if (o.epochs < 1) fail("epochs must be >= 1");
  if (o.minibatches < 1) fail("minibatches must be >= 1");
  if (o.max_grad_norm < 0 || o.value_clip < 0) fail("max_grad_norm and value_clip must be >= 0");
  if (!(o.rho_bar > 0 && o.c_bar > 0)) fail("rho_bar and c_bar must be > 0");
  if (o.allreduce_bucket_bytes < 1) fail("allreduce_bucket_bytes must be >= 1");
}

// Mean of `values` over the true entries of `mask`.
at::Tensor masked_mean(const at::Tensor& values, const at::Tensor& mask) {
  return values.masked_select(mask).mean();
}

std::vector<at::Tensor> parameter_list(ActorCritic& model) { return model.parameters(); }

// The rows of minibatch `minibatch` of `minibatches` from a permutation of the rows. Every
// learner takes the same number of optimizer steps (the gradient all-reduce is a
// collective), so a batch with fewer rows than minibatches reuses rows.
at::Tensor minibatch_rows(const at::Tensor& order, int64_t minibatch, int64_t minibatches) {
  const int64_t rows = order.size(0);
  at::Tensor index = order.slice(0, minibatch, rows, minibatches);
  return index.numel() > 0 ? index : order.narrow(0, minibatch % rows, 1);
}

}  // namespace

Learner::Learner(std::shared_ptr<ActorCritic> model, LearnerOptions options, std::shared_ptr<Communicator> communicator)
    : model_(std::move(model)),
      options_(std::move(options)),
      communicator_(std::move(communicator)),
      optimizer_(parameter_list(*model_), torch::optim::AdamOptions(options_.learning_rate).eps(1e-5)) {
  validate(options_);
  if (options_.overlap_allreduce && communicator_->size() > 1) {
    reducer_ = std::make_unique<GradientReducer>(model_->parameters(), communicator_, options_.allreduce_bucket_bytes);
  }
}

c10::Device Learner::device() const { return model_->parameters().front().device(); }

void Learner::synchronize_parameters() {
  std::vector<at::Tensor> parameters = model_->parameters();
  torch::NoGradGuard no_grad;
  communicator_->broadcast(parameters, /*root=*/0);
}

double Learner::step_optimizer(const at::Tensor& loss) {
  optimizer_.zero_grad();
  if (reducer_) {
    reducer_->prepare();
    loss.backward();
    reducer_->finish();
    allreduce_buckets_ += static_cast<int64_t>(reducer_->bucket_count());
    allreduce_buckets_during_backward_ += static_cast<int64_t>(reducer_->buckets_started_during_backward());
  } else {
    loss.backward();
    std::vector<at::Tensor> grads;
    for (auto& parameter : model_->parameters()) {
      if (!parameter.grad().defined()) parameter.mutable_grad() = at::zeros_like(parameter);
      grads.push_back(parameter.grad());
    }
    communicator_->all_reduce_mean(grads);
  }
  // Every learner must skip together: a loss that is not finite on one learner counts for
  // all, and the averaged gradient is the same everywhere.
  const bool loss_finite = loss.isfinite().item<bool>();
  const bool all_losses_finite = communicator_->all_reduce_sum(loss_finite ? 0.0 : 1.0) == 0.0;
  const double max_norm = options_.max_grad_norm > 0 ? options_.max_grad_norm : std::numeric_limits<double>::infinity();
  const double norm = torch::nn::utils::clip_grad_norm_(model_->parameters(), max_norm);
  if (!all_losses_finite || !std::isfinite(norm)) {
    optimizer_.zero_grad();
    skipped_this_update_ = true;
    return norm;
  }
  double rate = options_.learning_rate;
  if (options_.lr_schedule == "linear" && options_.planned_updates > 0) {
    rate *= std::max(0.0, 1.0 - static_cast<double>(updates_) / static_cast<double>(options_.planned_updates));
  }
  for (auto& group : optimizer_.param_groups()) static_cast<torch::optim::AdamOptions&>(group.options()).lr(rate);
  optimizer_.step();
  return norm;
}

void Learner::optimize(const at::Tensor& policy_loss, const at::Tensor& value_loss, const at::Tensor& entropy,
                       bool first_step, UpdateStats& stats) {
  if (skipped_this_update_) return;  // the update is abandoned on every learner alike
  at::Tensor loss = policy_loss + options_.value_coef * value_loss - options_.entropy_coef * entropy;
  if (inject_nonfinite_loss_) loss = loss * std::numeric_limits<double>::quiet_NaN();
  stats.grad_norm = step_optimizer(loss);
  if (first_step) {
    stats.policy_loss = policy_loss.item<double>();
    stats.value_loss = value_loss.item<double>();
    stats.entropy = entropy.item<double>();
  }
}

UpdateStats Learner::update(const std::vector<Episode>& episodes) {
  skipped_this_update_ = false;
  UpdateStats stats = options_.algorithm == "ppo" ? update_ppo(episodes) : update_vtrace(episodes);
  stats.skipped = skipped_this_update_;
  inject_nonfinite_loss_ = false;
  ++updates_;
  stats.episodes = static_cast<int64_t>(episodes.size());
  for (const auto& e : episodes) stats.steps += e.length();
  return stats;
}

UpdateStats Learner::update_ppo(const std::vector<Episode>& episodes) {
  const WindowBatch batch = pack_windows(episodes, model_->trunk().transformer().max_seq_len()).to(device());
  const at::Tensor& mask = batch.step_mask;
  at::Tensor old_values, advantages, returns, anchor_log_probs, behaviour_weights;
  UpdateStats stats;
  {
    torch::NoGradGuard no_grad;
    const PolicyWindow start = model_->evaluate(batch.observations, batch.is_init);
    old_values = start.values;
    if (options_.decoupled) {
      anchor_log_probs = model_->log_prob(start, batch.actions);
      behaviour_weights = (anchor_log_probs - batch.behaviour_log_probs).exp().clamp_max(options_.rho_bar);
      const at::Tensor real_weights = behaviour_weights.masked_select(mask);
      stats.rho_mean = real_weights.mean().item<double>();
      stats.rho_max = real_weights.max().item<double>();
    } else {
      anchor_log_probs = batch.behaviour_log_probs;  // classic PPO: no behaviour weights
    }
    // GAE is a backward scan per episode: done on the host, in one copy each way.
    const at::Tensor host_values = old_values.to(at::kCPU);
    const at::Tensor host_rewards = batch.rewards.to(at::kCPU);
    at::Tensor host_advantages = at::zeros_like(host_values);
    for (const EpisodeSlot& slot : batch.slots) {
      const at::Tensor row_values = host_values[slot.row];
      const double bootstrap = slot.terminated ? 0.0 : row_values[slot.offset + slot.length].item<double>();
      host_advantages[slot.row].narrow(0, slot.offset, slot.length)
          .copy_(generalized_advantages(host_rewards[slot.row].narrow(0, slot.offset, slot.length) * options_.reward_scale,
                                        row_values.narrow(0, slot.offset, slot.length), bootstrap, options_.gamma,
                                        options_.gae_lambda));
    }
    advantages = host_advantages.to(old_values.device());
    returns = advantages + old_values;
    const at::Tensor real = advantages.masked_select(mask);
    const double std = real.numel() > 1 ? real.std().item<double>() : 1.0;
    advantages = (advantages - real.mean()) / (std + 1e-8);
  }

  const int64_t rows = batch.rows();
  int64_t computed_steps = 0;
  int64_t computed_tokens = 0;
  at::Generator generator = at::detail::createCPUGenerator(static_cast<uint64_t>(updates_) * 7919 + 17);
  bool first = true;
  const double optimizer_steps = static_cast<double>(options_.epochs * options_.minibatches);
  at::Tensor kl_sum = at::zeros({}, old_values.options());
  at::Tensor clip_sum = at::zeros({}, old_values.options());
  for (int64_t epoch = 0; epoch < options_.epochs; ++epoch) {
    const at::Tensor order = at::randperm(rows, generator, at::TensorOptions().dtype(at::kLong));
    for (int64_t minibatch = 0; minibatch < options_.minibatches; ++minibatch) {
      const WindowRows rows_of(batch, minibatch_rows(order, minibatch, options_.minibatches));
      computed_steps += rows_of.steps();
      computed_tokens += rows_of.computed_tokens();
      const at::Tensor mb_mask = rows_of(mask);
      const at::Tensor mb_advantages = rows_of(advantages);
      const at::Tensor mb_returns = rows_of(returns);
      const at::Tensor mb_old_values = rows_of(old_values);
      const PolicyWindow window = model_->evaluate(rows_of(batch.observations), rows_of(batch.is_init));
      const at::Tensor log_probs = model_->log_prob(window, rows_of(batch.actions));
      const at::Tensor log_ratio = log_probs - rows_of(anchor_log_probs);
      const at::Tensor ratio = log_ratio.exp();
      at::Tensor surrogate = at::min(ratio * mb_advantages,
                                     ratio.clamp(1 - options_.clip_epsilon, 1 + options_.clip_epsilon) * mb_advantages);
      if (behaviour_weights.defined()) surrogate = rows_of(behaviour_weights) * surrogate;
      const at::Tensor policy_loss = -masked_mean(surrogate, mb_mask);
      at::Tensor value_error = (window.values - mb_returns).pow(2);
      if (options_.value_clip > 0) {
        const at::Tensor clipped =
            mb_old_values + (window.values - mb_old_values).clamp(-options_.value_clip, options_.value_clip);
        value_error = at::max(value_error, (clipped - mb_returns).pow(2));
      }
      const at::Tensor value_loss = 0.5 * masked_mean(value_error, mb_mask);
      const at::Tensor entropy = masked_mean(model_->entropy(window), mb_mask);
      optimize(policy_loss, value_loss, entropy, std::exchange(first, false), stats);
      // KL and clip fraction averaged over every optimizer step, since the first one is 0
      // by construction for decoupled PPO.
      torch::NoGradGuard no_grad;
      // k3 estimator of KL(anchor || pi), and how often the ratio was clipped; summed on
      // the device and read once per update.
      kl_sum += masked_mean((ratio - 1) - log_ratio, mb_mask);
      clip_sum += masked_mean(((ratio - 1).abs() > options_.clip_epsilon).to(at::kFloat), mb_mask);
    }
  }
  stats.approx_kl = kl_sum.item<double>() / optimizer_steps;
  stats.clip_fraction = clip_sum.item<double>() / optimizer_steps;
  stats.packing_efficiency = static_cast<double>(computed_steps) / static_cast<double>(computed_tokens);
  stats.learning_rate = static_cast<torch::optim::AdamOptions&>(optimizer_.param_groups()[0].options()).lr();
  return stats;
}

UpdateStats Learner::update_vtrace(const std::vector<Episode>& episodes) {
  const WindowBatch batch = pack_windows(episodes, model_->trunk().transformer().max_seq_len()).to(device());
  UpdateStats stats;
  int64_t computed_steps = 0;
  int64_t computed_tokens = 0;
  // Several optimizer steps per batch (epochs x minibatches of rows), each recomputing the
  // V-trace targets with the current values: more learning per env step than IMPALA's
  // single pass, and with one epoch and one minibatch it is exactly that single pass.
  const int64_t rows = batch.rows();
  at::Generator generator = at::detail::createCPUGenerator(static_cast<uint64_t>(updates_) * 7919 + 17);
  const double optimizer_steps = static_cast<double>(options_.epochs * options_.minibatches);
  bool first = true;
  std::vector<std::vector<const EpisodeSlot*>> slots_of_row(rows);
  for (const EpisodeSlot& slot : batch.slots) slots_of_row[slot.row].push_back(&slot);
  for (int64_t epoch = 0; epoch < options_.epochs; ++epoch) {
    const at::Tensor order = at::randperm(rows, generator, at::TensorOptions().dtype(at::kLong));
    for (int64_t minibatch = 0; minibatch < options_.minibatches; ++minibatch) {
      const WindowRows rows_of(batch, minibatch_rows(order, minibatch, options_.minibatches));
      computed_steps += rows_of.steps();
      computed_tokens += rows_of.computed_tokens();
      const at::Tensor mask = rows_of(batch.step_mask);
      const at::Tensor actions = rows_of(batch.actions);
      const PolicyWindow window = model_->evaluate(rows_of(batch.observations), rows_of(batch.is_init));
      const at::Tensor log_probs = model_->log_prob(window, actions);
      // V-trace is a backward scan per episode: done on the host, in one copy each way.
      const at::Tensor values = window.values.detach().to(at::kCPU);
      at::Tensor vs = at::zeros_like(values);
      at::Tensor pg_advantages = at::zeros_like(values);
      at::Tensor rhos = at::zeros_like(values);
      {
        torch::NoGradGuard no_grad;
        const at::Tensor log_rhos = (log_probs.detach() - rows_of(batch.behaviour_log_probs)).to(at::kCPU);
        const at::Tensor rewards = rows_of(batch.rewards).to(at::kCPU);
        const auto picked = rows_of.host_index().accessor<int64_t, 1>();
        for (int64_t position = 0; position < picked.size(0); ++position) {
          for (const EpisodeSlot* slot_in_row : slots_of_row[picked[position]]) {
            const EpisodeSlot& slot = *slot_in_row;
            const double bootstrap = slot.terminated ? 0.0 : values[position][slot.offset + slot.length].item<double>();
            auto steps = [&](const at::Tensor& t) { return t[position].narrow(0, slot.offset, slot.length); };
            const VTraceTargets targets =
                vtrace_targets(steps(rewards) * options_.reward_scale, steps(values), bootstrap, steps(log_rhos),
                               options_.gamma, options_.rho_bar, options_.c_bar);
            steps(vs).copy_(targets.vs);
            steps(pg_advantages).copy_(targets.pg_advantages);
            steps(rhos).copy_(targets.clipped_rhos);
          }
        }
      }
      vs = vs.to(mask.device());
      pg_advantages = pg_advantages.to(mask.device());
      rhos = rhos.to(mask.device());
      const at::Tensor policy_loss = -masked_mean(log_probs * pg_advantages, mask);
      const at::Tensor value_loss = 0.5 * masked_mean((window.values - vs).pow(2), mask);
      const at::Tensor entropy = masked_mean(model_->entropy(window), mask);
      optimize(policy_loss, value_loss, entropy, std::exchange(first, false), stats);
      torch::NoGradGuard no_grad;
      const at::Tensor real_rhos = rhos.masked_select(mask);
      stats.rho_mean += real_rhos.mean().item<double>() / optimizer_steps;
      stats.rho_max = std::max(stats.rho_max, real_rhos.max().item<double>());
    }
  }
  stats.packing_efficiency = static_cast<double>(computed_steps) / static_cast<double>(computed_tokens);
  stats.learning_rate = static_cast<torch::optim::AdamOptions&>(optimizer_.param_groups()[0].options()).lr();
  return stats;
}

}  // namespace kvrl
