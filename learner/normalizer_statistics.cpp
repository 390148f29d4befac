#include "learner/normalizer_statistics.h"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <c10/core/GradMode.h>

#include "common/comm/communicator.h"

namespace kvrl {
namespace {

// Sums of `values` over every learner (the communicator averages in float32).
at::Tensor sum_over_learners(const at::Tensor& values, Communicator& communicator) {
  std::vector<at::Tensor> reduced{values.to(at::kFloat)};
  communicator.all_reduce_mean(reduced);
  return reduced.front().to(at::kDouble) * static_cast<double>(communicator.size());
}

}  // namespace

BatchMoments all_learner_moments(const at::Tensor& rows, Communicator& communicator) {
  c10::NoGradGuard no_grad;
  const at::Tensor x = rows.to(at::kDouble);
  const int64_t features = x.size(1);
  if (communicator.size() == 1) {
    const double count = static_cast<double>(x.size(0));
    if (count == 0) return {0, at::zeros({features}, x.options()), at::zeros({features}, x.options())};
    return {count, x.mean(0), x.var(0, /*unbiased=*/false)};
  }
  const at::Tensor count_and_sums = sum_over_learners(
      at::cat({at::tensor({static_cast<double>(x.size(0))}, x.options()), x.sum(0)}), communicator);
  const double count = count_and_sums[0].item<double>();
  if (count < 0.5) return {0, at::zeros({features}, x.options()), at::zeros({features}, x.options())};
  const at::Tensor mean = count_and_sums.slice(0, 1) / count;
  const at::Tensor centered = x - mean;
  const at::Tensor var = sum_over_learners((centered * centered).sum(0), communicator) / count;
  return {count, mean, var};
}

at::Tensor step_observations(const std::vector<Episode>& episodes, int64_t observation_size) {
  std::vector<at::Tensor> pieces;
  for (const Episode& episode : episodes) {
    pieces.push_back(at::from_blob(const_cast<float*>(episode.observations.data()),
                                   {episode.length(), observation_size}, at::kFloat));
  }
  if (pieces.empty()) return at::zeros({0, observation_size});
  return at::cat(pieces).clone();
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
