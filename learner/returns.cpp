#include "learner/returns.h"

#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <cmath>

namespace kvrl {

at::Tensor generalized_advantages(const at::Tensor& rewards, const at::Tensor& values, double bootstrap_value,
                                  double gamma, double lambda) {
  const at::Tensor r = rewards.to(at::kFloat).contiguous();
  const at::Tensor v = values.to(at::kFloat).contiguous();
  at::Tensor advantages = at::empty_like(r);
  const float* rp = r.data_ptr<float>();
  const float* vp = v.data_ptr<float>();
  float* ap = advantages.data_ptr<float>();
  double next_value = bootstrap_value;
  double running = 0.0;
  for (int64_t t = r.numel() - 1; t >= 0; --t) {
    const double delta = rp[t] + gamma * next_value - vp[t];
    running = delta + gamma * lambda * running;
    ap[t] = static_cast<float>(running);
    next_value = vp[t];
  }
  return advantages;
}

VTraceTargets vtrace_targets(const at::Tensor& rewards, const at::Tensor& values, double bootstrap_value,
                             const at::Tensor& log_rhos, double gamma, double rho_bar, double c_bar) {
  const at::Tensor r = rewards.to(at::kFloat).contiguous();
  const at::Tensor v = values.to(at::kFloat).contiguous();
  const at::Tensor lr = log_rhos.to(at::kFloat).contiguous();
  const int64_t length = r.numel();
  VTraceTargets out{at::empty_like(r), at::empty_like(r), at::empty_like(r)};
  const float *rp = r.data_ptr<float>(), *vp = v.data_ptr<float>(), *lp = lr.data_ptr<float>();
  float *vs = out.vs.data_ptr<float>(), *pg = out.pg_advantages.data_ptr<float>(),
        *cr = out.clipped_rhos.data_ptr<float>();
  // vs_t = V(x_t) + delta_t + gamma * c_t * (vs_{t+1} - V(x_{t+1})), computed backwards.
  double next_vs = bootstrap_value;
  double next_value = bootstrap_value;
  double correction = 0.0;  // vs_{t+1} - V(x_{t+1})
  for (int64_t t = length - 1; t >= 0; --t) {
    const double rho = std::exp(static_cast<double>(lp[t]));
    const double clipped_rho = std::min(rho_bar, rho);
    const double c = std::min(c_bar, rho);
    const double delta = clipped_rho * (rp[t] + gamma * next_value - vp[t]);
    correction = delta + gamma * c * correction;
    vs[t] = static_cast<float>(vp[t] + correction);
    pg[t] = static_cast<float>(clipped_rho * (rp[t] + gamma * next_vs - vp[t]));
    cr[t] = static_cast<float>(clipped_rho);
    next_vs = vs[t];
    next_value = vp[t];
  }
  return out;
}

}  // namespace kvrl
