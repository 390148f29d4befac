// Per-episode learning targets: generalized advantage estimation (PPO) and V-trace
// (IMPALA). Both take the bootstrap value of the state after the last step, which is
// zero for a terminated episode and V(final observation) for a truncated one.
#pragma once

#include <ATen/core/Tensor.h>

namespace kvrl {

// rewards, values: [L] float. Returns advantages [L]; returns = advantages + values.
at::Tensor generalized_advantages(const at::Tensor& rewards, const at::Tensor& values, double bootstrap_value,
                                  double gamma, double lambda);

struct VTraceTargets {
  at::Tensor vs;             // [L] value targets
  at::Tensor pg_advantages;  // [L] rho_t * (r_t + gamma * vs_{t+1} - V(x_t))
  at::Tensor clipped_rhos;   // [L] min(rho_bar, pi/mu)
};

// log_rhos = log pi(a_t) - log mu(a_t), [L].
VTraceTargets vtrace_targets(const at::Tensor& rewards, const at::Tensor& values, double bootstrap_value,
                             const at::Tensor& log_rhos, double gamma, double rho_bar, double c_bar);

}  // namespace kvrl
