#include "common/model/running_moments.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/clamp.h>
#include <ATen/ops/sqrt.h>
#include <c10/core/GradMode.h>

#include <cmath>

namespace kvrl {

void RunningMoments::merge(const BatchMoments& batch) {
  if (batch.count <= 0) return;
  c10::NoGradGuard no_grad;
  const at::Tensor old_mean = mean.to(at::kDouble), old_var = var.to(at::kDouble);
  const double old_count = count.to(at::kDouble).item<double>();
  const double total = old_count + batch.count;
  const at::Tensor delta = batch.mean.to(old_mean.device(), at::kDouble) - old_mean;
  const at::Tensor m2 = old_var * old_count + batch.var.to(old_mean.device(), at::kDouble) * batch.count +
                        delta * delta * (old_count * batch.count / total);
  mean.copy_(old_mean + delta * (batch.count / total));
  var.copy_(m2 / total);
  count.fill_(total);
}

at::Tensor RunningMoments::normalize(const at::Tensor& x, double clip) const {
  return at::clamp((x - mean) / at::sqrt(var + kMomentsEpsilon), -clip, clip);
}

double RunningMoments::inverse_std() const {
  return 1.0 / std::sqrt(var.to(at::kDouble)[0].item<double>() + kMomentsEpsilon);
}

}  // namespace kvrl
