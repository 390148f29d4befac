#include "learner/normalizer_statistics.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include "common/comm/communicator.h"
#include "learner/window_batch.h"

namespace kvrl {
namespace {

// Sums of `values` over every learner, reduced on `device` (NCCL reduces device memory
// only); the communicator averages in float32.
at::Tensor sum_over_learners(const at::Tensor& values, Communicator& communicator, c10::Device device) {
  std::vector<at::Tensor> reduced{values.to(device, at::kFloat)};
  communicator.all_reduce_mean(reduced);
  return reduced.front().to(at::kCPU, at::kDouble) * static_cast<double>(communicator.size());
}

}  // namespace

BatchMoments all_learner_moments(const at::Tensor& rows, Communicator& communicator, c10::Device device) {
  c10::NoGradGuard no_grad;
  at::Tensor x = rows.to(at::kCPU, at::kDouble);
  // A non-finite row (a diverged physics state, say) would poison the statistics for good.
  x = x.index_select(0, x.isfinite().all(1).nonzero().view(-1));
  const int64_t features = x.size(1);
  const auto empty = [&] {
    return BatchMoments{0, at::zeros({features}, x.options()), at::zeros({features}, x.options())};
  };
  if (communicator.size() == 1) {
    if (x.size(0) == 0) return empty();
    return {static_cast<double>(x.size(0)), x.mean(0), x.var(0, /*unbiased=*/false)};
  }
  // The count exactly, in float64; the sums, then the squares about the common mean.
  const double count = communicator.all_reduce_sum(static_cast<double>(x.size(0)));
  const at::Tensor sums = sum_over_learners(x.sum(0), communicator, device);
  if (count < 0.5) return empty();
  const at::Tensor mean = sums / count;
  const at::Tensor centered = x - mean;
  const at::Tensor var = sum_over_learners((centered * centered).sum(0), communicator, device) / count;
  return {count, mean, var};
}

at::Tensor step_observations(const std::vector<Episode>& episodes, int64_t observation_size) {
  std::vector<at::Tensor> pieces;
  pieces.reserve(episodes.size());
  for (const Episode& episode : episodes) {
    pieces.push_back(at::from_blob(const_cast<void*>(episode.observations.data()),
                                   {episode.length(), observation_size},
                                   observation_scalar_type(episode.observations.element())));
  }
  if (pieces.empty()) return at::zeros({0, observation_size});
  return at::cat(pieces).to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
}

at::Tensor discounted_returns(const std::vector<Episode>& episodes, double gamma) {
  std::vector<double> returns;
  for (const Episode& episode : episodes) {
    double so_far = 0;
    for (float reward : episode.rewards) {
      so_far = gamma * so_far + reward;
      returns.push_back(so_far);
    }
  }
  return at::tensor(returns, at::kDouble).view({-1, 1});
}

}  // namespace kvrl
