#include "learner/learner.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/randperm.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/utils/clip_grad.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/support/errors.h"
#include "learner/advantage_rules.h"
#include "learner/normalizer_statistics.h"
#include "learner/policy_losses.h"
#include "learner/window_batch.h"

namespace kvrl {
namespace {

void validate(const LearnerOptions& o) {
  auto fail = [](const std::string& message) { throw InvalidArgumentError("learner." + message); };
  if (o.algorithm != "ppo" && o.algorithm != "vtrace")
    fail("algorithm (" + o.algorithm + ") must be ppo or vtrace");
  for (const auto& [key, schedule] :
       {std::pair{"lr_schedule", &o.lr_schedule}, {"entropy_schedule", &o.entropy_schedule}}) {
    if (*schedule != "constant" && *schedule != "linear") {
      fail(std::string(key) + " (" + *schedule + ") must be constant or linear");
    }
  }
  const std::string& scope = o.advantage_normalization;
  if (scope != "auto" && scope != "batch" && scope != "minibatch" && scope != "none") {
    fail("advantage_normalization (" + scope + ") must be auto, batch, minibatch or none");
  }
  if (const auto problem = advantage_key_problem(o.algorithm, scope, o.recompute_advantages)) {
    throw InvalidArgumentError(problem->key + " (" + problem->value + "): " + problem->allowed);
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

// The parameters gradients train: not the normalisers' statistics, which are parameters
// only so that they travel with the weights.
std::vector<at::Tensor> trainable_parameters(ActorCritic& model) {
  std::vector<at::Tensor> trainable;
  for (const at::Tensor& parameter : model.parameters()) {
    if (parameter.requires_grad()) trainable.push_back(parameter);
  }
  return trainable;
}

// The rows of minibatch `minibatch` of `minibatches` from a permutation of the rows. Every
// learner takes the same number of optimizer steps (the gradient all-reduce is a
// collective), so a batch with fewer rows than minibatches reuses rows.
at::Tensor minibatch_rows(const at::Tensor& order, int64_t minibatch, int64_t minibatches) {
  const int64_t rows = order.size(0);
  at::Tensor index = order.slice(0, minibatch, rows, minibatches);
  return index.numel() > 0 ? index : order.narrow(0, minibatch % rows, 1);
}

}  // namespace

Learner::Learner(std::shared_ptr<ActorCritic> model, LearnerOptions options,
                 std::shared_ptr<Communicator> communicator)
    : model_(std::move(model)),
      options_(std::move(options)),
      communicator_(std::move(communicator)),
      optimizer_(trainable_parameters(*model_), torch::optim::AdamOptions(options_.learning_rate).eps(1e-5)) {
  validate(options_);
  if (options_.overlap_allreduce && communicator_->size() > 1) {
    reducer_ = std::make_unique<GradientReducer>(trainable_parameters(*model_), communicator_,
                                                 options_.allreduce_bucket_bytes);
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
    for (auto& parameter : trainable_parameters(*model_)) {
      if (!parameter.grad().defined()) parameter.mutable_grad() = at::zeros_like(parameter);
      grads.push_back(parameter.grad());
    }
    communicator_->all_reduce_mean(grads);
  }
  // Every learner must skip together: a loss that is not finite on one learner counts for
  // all, and the averaged gradient is the same everywhere.
  const bool loss_finite = loss.isfinite().item<bool>();
  const bool all_losses_finite = communicator_->all_reduce_sum(loss_finite ? 0.0 : 1.0) == 0.0;
  const double max_norm =
      options_.max_grad_norm > 0 ? options_.max_grad_norm : std::numeric_limits<double>::infinity();
  const double norm = torch::nn::utils::clip_grad_norm_(trainable_parameters(*model_), max_norm);
  if (!all_losses_finite || !std::isfinite(norm)) {
    optimizer_.zero_grad();
    skipped_this_update_ = true;
    return norm;
  }
  const double rate = scheduled(options_.learning_rate, options_.lr_schedule);
  for (auto& group : optimizer_.param_groups())
    static_cast<torch::optim::AdamOptions&>(group.options()).lr(rate);
  optimizer_.step();
  return norm;
}

void Learner::optimize(const at::Tensor& policy_loss, const at::Tensor& value_loss, const at::Tensor& entropy,
                       bool first_step, UpdateStats& stats) {
  if (skipped_this_update_) return;  // the update is abandoned on every learner alike
  stats.entropy_coef = scheduled(options_.entropy_coef, options_.entropy_schedule);
  at::Tensor loss = policy_loss + options_.value_coef * value_loss - stats.entropy_coef * entropy;
  if (inject_nonfinite_loss_) loss = loss * std::numeric_limits<double>::quiet_NaN();
  stats.grad_norm = step_optimizer(loss);
  if (first_step) {
    stats.policy_loss = policy_loss.item<double>();
    stats.value_loss = value_loss.item<double>();
    stats.entropy = entropy.item<double>();
  }
}

UpdateStats Learner::update(const std::vector<Episode>& episodes, int64_t policy_version) {
  skipped_this_update_ = false;
  const ActorCriticOptions& policy = model_->options();
  // As Gymnasium's NormalizeReward: the batch's returns count before its rewards are scaled.
  if (policy.normalize_rewards) {
    model_->return_moments().merge(
        all_learner_moments(discounted_returns(episodes, options_.gamma), *communicator_, device()));
  }
  UpdateStats stats = options_.algorithm == "ppo" ? update_ppo(episodes, policy_version)
                                                  : update_vtrace(episodes, policy_version);
  // After the update, so that the batch was trained on with the normaliser it was acted
  // with; the next version's weights carry the new statistics.
  if (policy.normalize_observations) {
    model_->observation_moments().merge(all_learner_moments(
        step_observations(episodes, model_->observation_size()), *communicator_, device()));
  }
  stats.skipped = skipped_this_update_;
  inject_nonfinite_loss_ = false;
  ++updates_;
  stats.episodes = static_cast<int64_t>(episodes.size());
  for (const auto& e : episodes) stats.steps += e.length();
  return stats;
}

void Learner::train_on_minibatches(const WindowBatch& batch, const MinibatchLossFn& loss_of,
                                   UpdateStats& stats, const std::function<void(int64_t)>& before_epoch) {
  int64_t computed_steps = 0;
  int64_t computed_tokens = 0;
  at::Generator generator = at::detail::createCPUGenerator(static_cast<uint64_t>(updates_) * 7919 + 17);
  bool first = true;
  for (int64_t epoch = 0; epoch < options_.epochs; ++epoch) {
    if (before_epoch) before_epoch(epoch);
    const at::Tensor order = at::randperm(batch.rows(), generator, at::TensorOptions().dtype(at::kLong));
    for (int64_t minibatch = 0; minibatch < options_.minibatches; ++minibatch) {
      const WindowRows rows_of(batch, minibatch_rows(order, minibatch, options_.minibatches));
      computed_steps += rows_of.steps();
      computed_tokens += rows_of.computed_tokens();
      const PolicyWindow window = model_->evaluate(rows_of(batch.observations), rows_of(batch.is_init));
      const MinibatchLoss loss = loss_of(rows_of, window);
      optimize(loss.policy, loss.value, loss.entropy, std::exchange(first, false), stats);
    }
  }
  stats.packing_efficiency = static_cast<double>(computed_steps) / static_cast<double>(computed_tokens);
  stats.learning_rate = static_cast<torch::optim::AdamOptions&>(optimizer_.param_groups()[0].options()).lr();
}

// What PPO's minibatches train against, set at the batch's start (the values, advantages
// and returns again before each later epoch with recompute_advantages).
struct PpoTargets {
  at::Tensor old_values, advantages, returns;
  at::Tensor anchor_log_probs;   // the ratio's denominator
  at::Tensor behaviour_weights;  // decoupled PPO only
};

ReturnOptions Learner::return_options() const {
  double reward_scale = options_.reward_scale;
  if (model_->options().normalize_rewards) reward_scale *= model_->return_moments().inverse_std();
  return ReturnOptions{options_.gamma, options_.gae_lambda, reward_scale, options_.rho_bar, options_.c_bar};
}

WindowBatch Learner::pack(const std::vector<Episode>& episodes) const {
  const int64_t limit = options_.max_window_tokens > 0 ? options_.max_window_tokens
                                                       : model_->trunk().transformer().max_seq_len();
  return pack_windows(episodes, limit).to(device());
}

namespace {

void record_agreement(const ActingAgreement& agreement, UpdateStats& stats) {
  stats.acting_kl = agreement.kl;
  stats.same_version_steps = agreement.same_version_steps;
  stats.same_version_max_log_prob_error = agreement.same_version_max_log_prob_error;
  stats.same_version_max_value_error = agreement.same_version_max_value_error;
}

at::Tensor all_rows(const WindowBatch& batch) { return at::arange(batch.rows(), at::kLong); }

}  // namespace

double Learner::scheduled(double value, const std::string& schedule) const {
  if (schedule != "linear" || options_.planned_updates <= 0) return value;
  return value *
         std::max(0.0, 1.0 - static_cast<double>(updates_) / static_cast<double>(options_.planned_updates));
}

std::string Learner::advantage_scope() const {
  if (options_.advantage_normalization != "auto") return options_.advantage_normalization;
  return options_.algorithm == "ppo" ? "batch" : "none";
}

void Learner::set_advantages(const WindowBatch& batch, const at::Tensor& values, PpoTargets& targets) const {
  const at::Tensor advantages = episode_advantages(batch, values, return_options());
  targets.returns = advantages + values;
  targets.advantages =
      advantage_scope() == "batch" ? normalized_advantages(advantages, batch.step_mask) : advantages;
}

UpdateStats Learner::update_ppo(const std::vector<Episode>& episodes, int64_t policy_version) {
  const WindowBatch batch = pack(episodes);
  UpdateStats stats;
  PpoTargets targets;
  {
    torch::NoGradGuard no_grad;
    const PolicyWindow start = model_->evaluate(batch.observations, batch.is_init);
    targets.old_values = start.values;
    const at::Tensor start_log_probs = model_->log_prob(start, batch.actions);
    record_agreement(acting_agreement(batch, WindowRows(batch, all_rows(batch)), start_log_probs,
                                      start.values, policy_version),
                     stats);
    if (options_.decoupled) {
      targets.anchor_log_probs = start_log_probs;
      targets.behaviour_weights =
          (targets.anchor_log_probs - batch.behaviour_log_probs).exp().clamp_max(options_.rho_bar);
      const at::Tensor real_weights = targets.behaviour_weights.masked_select(batch.step_mask);
      stats.rho_mean = real_weights.mean().item<double>();
      stats.rho_max = real_weights.max().item<double>();
    } else {
      targets.anchor_log_probs = batch.behaviour_log_probs;  // classic PPO: no behaviour weights
    }
    set_advantages(batch, targets.old_values, targets);
  }
  // As TorchRL's GAE module writes the epoch's values into the batch, where the value clip
  // then anchors too.
  const auto refresh_advantages = [&](int64_t epoch) {
    if (epoch == 0 || !options_.recompute_advantages) return;
    torch::NoGradGuard no_grad;
    targets.old_values = model_->evaluate(batch.observations, batch.is_init).values;
    set_advantages(batch, targets.old_values, targets);
  };
  at::Tensor kl_sum = at::zeros({}, targets.old_values.options());
  at::Tensor clip_sum = at::zeros({}, targets.old_values.options());
  const auto loss_of = [&](const WindowRows& rows_of, const PolicyWindow& window) {
    PpoTokens tokens{model_->log_prob(window, rows_of(batch.actions)),
                     rows_of(targets.anchor_log_probs),
                     targets.behaviour_weights.defined() ? rows_of(targets.behaviour_weights) : at::Tensor(),
                     advantage_scope() == "minibatch"
                         ? normalized_advantages(rows_of(targets.advantages), rows_of(batch.step_mask))
                         : rows_of(targets.advantages),
                     rows_of(targets.returns),
                     window.values,
                     rows_of(targets.old_values),
                     model_->entropy(window),
                     rows_of(batch.step_mask)};
    const PpoLossTerms terms = ppo_loss_terms(tokens, options_.clip_epsilon, options_.value_clip);
    // Summed on the device over every optimizer step and read once per update.
    kl_sum += terms.approx_kl;
    clip_sum += terms.clip_fraction;
    return MinibatchLoss{terms.policy, terms.value, terms.entropy};
  };
  train_on_minibatches(batch, loss_of, stats, refresh_advantages);
  const double optimizer_steps = static_cast<double>(options_.epochs * options_.minibatches);
  stats.approx_kl = kl_sum.item<double>() / optimizer_steps;
  stats.clip_fraction = clip_sum.item<double>() / optimizer_steps;
  return stats;
}

// Several optimizer steps per batch (epochs x minibatches of rows), each recomputing the
// V-trace targets with the current values: more learning per env step than IMPALA's
// single pass, and with one epoch and one minibatch it is exactly that single pass.
UpdateStats Learner::update_vtrace(const std::vector<Episode>& episodes, int64_t policy_version) {
  const WindowBatch batch = pack(episodes);
  UpdateStats stats;
  bool first_minibatch = true;
  std::vector<std::vector<const EpisodeSlot*>> slots_of_row(batch.rows());
  for (const EpisodeSlot& slot : batch.slots) slots_of_row[slot.row].push_back(&slot);
  const double optimizer_steps = static_cast<double>(options_.epochs * options_.minibatches);
  const auto loss_of = [&](const WindowRows& rows_of, const PolicyWindow& window) {
    const at::Tensor mask = rows_of(batch.step_mask);
    const at::Tensor log_probs = model_->log_prob(window, rows_of(batch.actions));
    if (std::exchange(first_minibatch, false)) {
      record_agreement(acting_agreement(batch, rows_of, log_probs, window.values, policy_version), stats);
    }
    const VTraceRowTargets targets =
        vtrace_row_targets(batch, rows_of, window.values, log_probs, slots_of_row, return_options());
    const at::Tensor vs = targets.vs.to(mask.device());
    at::Tensor pg_advantages = targets.pg_advantages.to(mask.device());
    if (advantage_scope() == "minibatch") pg_advantages = normalized_advantages(pg_advantages, mask);
    {
      torch::NoGradGuard no_grad;
      const at::Tensor real_rhos = targets.clipped_rhos.to(mask.device()).masked_select(mask);
      stats.rho_mean += real_rhos.mean().item<double>() / optimizer_steps;
      stats.rho_max = std::max(stats.rho_max, real_rhos.max().item<double>());
    }
    return MinibatchLoss{-masked_mean(log_probs * pg_advantages, mask),
                         0.5 * masked_mean((window.values - vs).pow(2), mask),
                         masked_mean(model_->entropy(window), mask)};
  };
  train_on_minibatches(batch, loss_of, stats);
  return stats;
}

}  // namespace kvrl
