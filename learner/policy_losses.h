// The learning targets and loss terms of PPO and V-trace on a packed batch, apart from
// the model and the optimizer, so that tests compare them with independent
// implementations (tests/learner/targets_eval.cpp against TorchRL's estimators and loss).
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace kvrl {

struct EpisodeSlot;
struct WindowBatch;
class WindowRows;

struct ReturnOptions {
  double gamma = 0.99;
  double gae_lambda = 0.95;
  double reward_scale = 1.0;
  double rho_bar = 1.0;  // V-trace
  double c_bar = 1.0;    // V-trace
};

// Mean of `values` over the true entries of `mask`.
at::Tensor masked_mean(const at::Tensor& values, const at::Tensor& mask);

// GAE advantages [B, T] for every episode of the batch, from the values [B, T] the batch's
// tokens got (each episode's final observation included). A terminated episode bootstraps
// from 0, any other (truncated, cut) from the value of its final observation. Zero off
// the episodes' steps.
at::Tensor episode_advantages(const WindowBatch& batch, const at::Tensor& values,
                              const ReturnOptions& options);

// (advantages - mean) / (std + 1e-8) over the steps where `step_mask` is set (std of one
// step counts as 1).
at::Tensor normalized_advantages(const at::Tensor& advantages, const at::Tensor& step_mask);

// Per token of some rows of a batch, what PPO's loss compares.
struct PpoTokens {
  at::Tensor log_probs;          // log pi(a_t) under the current parameters
  at::Tensor anchor_log_probs;   // the ratio's denominator
  at::Tensor behaviour_weights;  // decoupled PPO's truncated pi_anchor/mu, or undefined
  at::Tensor advantages, returns;
  at::Tensor values, old_values;  // current and batch-start values
  at::Tensor entropy;
  at::Tensor mask;  // tokens that are episode steps
};

struct PpoLossTerms {
  at::Tensor policy;         // -mean(min(r A, clip(r, 1 +- eps) A)) (times the behaviour weights)
  at::Tensor value;          // 0.5 * mean((V - R)^2), the max with the clipped error when value_clip > 0
  at::Tensor entropy;        // mean entropy
  at::Tensor approx_kl;      // k3 estimate of KL(anchor || pi), no gradient
  at::Tensor clip_fraction;  // share of steps whose ratio left [1 - eps, 1 + eps], no gradient
};

PpoLossTerms ppo_loss_terms(const PpoTokens& tokens, double clip_epsilon, double value_clip);

// How the learner's policy at a batch's start agrees with the policy that acted.
struct ActingAgreement {
  double kl = 0;  // mean over steps of KL(acting || learner), k3 estimate from the taken actions
  // Over the steps acted with the learner's own version: the largest |log-prob| and |value|
  // differences. With the same weights and the same context these are float rounding.
  int64_t same_version_steps = 0;
  double same_version_max_log_prob_error = 0;
  double same_version_max_value_error = 0;
};

// log_probs and values [rows, T] of the learner's policy at the batch's start for some
// rows of a batch (`rows_of`), compared with what the actors recorded. `policy_version`:
// the learner's version (-1: no same-version figures).
ActingAgreement acting_agreement(const WindowBatch& batch, const WindowRows& rows_of,
                                 const at::Tensor& log_probs, const at::Tensor& values,
                                 int64_t policy_version);

// V-trace targets [rows, T] on the host for some rows of a batch, from the rows' values and
// log-probabilities under the current parameters.
struct VTraceRowTargets {
  at::Tensor vs, pg_advantages, clipped_rhos;
};

VTraceRowTargets vtrace_row_targets(const WindowBatch& batch, const WindowRows& rows_of,
                                    const at::Tensor& values, const at::Tensor& log_probs,
                                    const std::vector<std::vector<const EpisodeSlot*>>& slots_of_row,
                                    const ReturnOptions& options);

}  // namespace kvrl
