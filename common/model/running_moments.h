// Running per-feature mean and variance over batches, merged as Gymnasium's
// RunningMeanStd merges them (Chan et al.'s parallel update), for observation and
// return normalisation. The statistics live in tensors their owner registers as
// parameters without gradients, so they travel with the weights, the checkpoints and the
// exported policy: a policy version is its weights and its normaliser together.
#pragma once

#include <ATen/core/Tensor.h>

namespace kvrl {

// One batch's statistics: its size, and the per-feature mean and population variance.
struct BatchMoments {
  double count = 0;
  at::Tensor mean;  // [D] float64
  at::Tensor var;   // [D] float64
};

// Running statistics; `mean` and `var` [D] and `count` [1], float32, updated in place.
struct RunningMoments {
  at::Tensor mean, var, count;

  // Merges a batch in (nothing when its count is 0).
  void merge(const BatchMoments& batch);
  // (x - mean) / sqrt(var + epsilon), clipped to [-clip, clip]; x [..., D].
  at::Tensor normalize(const at::Tensor& x, double clip) const;
  // 1 / sqrt(var + epsilon) of the first feature, as a double: the reward scale.
  double inverse_std() const;
};

// Gymnasium's epsilon, in the variance and as the first count.
inline constexpr double kMomentsEpsilon = 1e-8;
inline constexpr double kInitialMomentCount = 1e-4;

}  // namespace kvrl
