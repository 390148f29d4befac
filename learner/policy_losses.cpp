#include "learner/policy_losses.h"

#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/max.h>
#include <ATen/ops/min.h>
#include <ATen/ops/ones_like.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros_like.h>

#include "learner/returns.h"
#include "learner/window_batch.h"

namespace kvrl {

at::Tensor masked_mean(const at::Tensor& values, const at::Tensor& mask) {
  return values.masked_select(mask).mean();
}

// GAE is a backward scan per episode: done on the host, in one copy each way.
at::Tensor episode_advantages(const WindowBatch& batch, const at::Tensor& values,
                              const ReturnOptions& options) {
  const at::Tensor host_values = values.to(at::kCPU);
  const at::Tensor host_rewards = batch.rewards.to(at::kCPU);
  at::Tensor host_advantages = at::zeros_like(host_values);
  for (const EpisodeSlot& slot : batch.slots) {
    const at::Tensor row_values = host_values[slot.row];
    const double bootstrap = slot.terminated ? 0.0 : row_values[slot.offset + slot.length].item<double>();
    host_advantages[slot.row]
        .narrow(0, slot.offset, slot.length)
        .copy_(generalized_advantages(
            host_rewards[slot.row].narrow(0, slot.offset, slot.length) * options.reward_scale,
            row_values.narrow(0, slot.offset, slot.length), bootstrap, options.gamma, options.gae_lambda));
  }
  return host_advantages.to(values.device());
}

// Masked sums instead of masked_select, so that no step reads the count back to the host:
// on a GPU this runs once per minibatch with advantage_normalization = minibatch.
at::Tensor normalized_advantages(const at::Tensor& advantages, const at::Tensor& step_mask) {
  const at::Tensor weights = step_mask.to(advantages.scalar_type());
  const at::Tensor count = weights.sum();
  const at::Tensor mean = (advantages * weights).sum() / count.clamp_min(1);
  const at::Tensor deviations = (advantages - mean) * weights;
  // Unbiased, as torch.std; a single step keeps a unit scale.
  const at::Tensor spread = (deviations.pow(2).sum() / (count - 1).clamp_min(1)).sqrt();
  const at::Tensor std = at::where(count > 1, spread, at::ones_like(spread));
  return (advantages - mean) / (std + 1e-8);
}

PpoLossTerms ppo_loss_terms(const PpoTokens& tokens, double clip_epsilon, double value_clip) {
  const at::Tensor log_ratio = tokens.log_probs - tokens.anchor_log_probs;
  const at::Tensor ratio = log_ratio.exp();
  at::Tensor surrogate =
      at::min(ratio * tokens.advantages, ratio.clamp(1 - clip_epsilon, 1 + clip_epsilon) * tokens.advantages);
  if (tokens.behaviour_weights.defined()) surrogate = tokens.behaviour_weights * surrogate;
  at::Tensor value_error = (tokens.values - tokens.returns).pow(2);
  if (value_clip > 0) {
    const at::Tensor clipped =
        tokens.old_values + (tokens.values - tokens.old_values).clamp(-value_clip, value_clip);
    value_error = at::max(value_error, (clipped - tokens.returns).pow(2));
  }
  PpoLossTerms terms{-masked_mean(surrogate, tokens.mask), 0.5 * masked_mean(value_error, tokens.mask),
                     masked_mean(tokens.entropy, tokens.mask), at::Tensor(), at::Tensor()};
  at::NoGradGuard no_grad;
  terms.approx_kl = masked_mean((ratio - 1) - log_ratio, tokens.mask);
  terms.clip_fraction = masked_mean(((ratio - 1).abs() > clip_epsilon).to(at::kFloat), tokens.mask);
  return terms;
}

// V-trace is a backward scan per episode: done on the host, in one copy each way, with
// the minibatch's current values (so each optimizer step has fresh targets).
VTraceRowTargets vtrace_row_targets(const WindowBatch& batch, const WindowRows& rows_of,
                                    const at::Tensor& values, const at::Tensor& log_probs,
                                    const std::vector<std::vector<const EpisodeSlot*>>& slots_of_row,
                                    const ReturnOptions& options) {
  at::NoGradGuard no_grad;
  const at::Tensor host_values = values.detach().to(at::kCPU);
  VTraceRowTargets out{at::zeros_like(host_values), at::zeros_like(host_values), at::zeros_like(host_values)};
  const at::Tensor log_rhos = (log_probs.detach() - rows_of(batch.behaviour_log_probs)).to(at::kCPU);
  const at::Tensor rewards = rows_of(batch.rewards).to(at::kCPU);
  const auto picked = rows_of.host_index().accessor<int64_t, 1>();
  for (int64_t position = 0; position < picked.size(0); ++position) {
    for (const EpisodeSlot* slot : slots_of_row[picked[position]]) {
      const double bootstrap =
          slot->terminated ? 0.0 : host_values[position][slot->offset + slot->length].item<double>();
      auto steps = [&](const at::Tensor& t) { return t[position].narrow(0, slot->offset, slot->length); };
      const VTraceTargets targets =
          vtrace_targets(steps(rewards) * options.reward_scale, steps(host_values), bootstrap,
                         steps(log_rhos), options.gamma, options.rho_bar, options.c_bar);
      steps(out.vs).copy_(targets.vs);
      steps(out.pg_advantages).copy_(targets.pg_advantages);
      steps(out.clipped_rhos).copy_(targets.clipped_rhos);
    }
  }
  return out;
}

}  // namespace kvrl

namespace kvrl {

ActingAgreement acting_agreement(const WindowBatch& batch, const WindowRows& rows_of,
                                 const at::Tensor& log_probs, const at::Tensor& values,
                                 int64_t policy_version) {
  at::NoGradGuard no_grad;
  const at::Tensor mask = rows_of(batch.step_mask);
  const at::Tensor log_ratio = (log_probs - rows_of(batch.behaviour_log_probs)).masked_select(mask);
  ActingAgreement agreement;
  agreement.kl = ((log_ratio.exp() - 1) - log_ratio).mean().item<double>();
  if (policy_version < 0) return agreement;
  const at::Tensor same = rows_of(batch.policy_versions) == policy_version;
  agreement.same_version_steps = same.sum().item<int64_t>();
  if (agreement.same_version_steps == 0) return agreement;
  agreement.same_version_max_log_prob_error =
      (log_probs - rows_of(batch.behaviour_log_probs)).abs().masked_select(same).max().item<double>();
  agreement.same_version_max_value_error =
      (values - rows_of(batch.behaviour_values)).abs().masked_select(same).max().item<double>();
  return agreement;
}

}  // namespace kvrl
