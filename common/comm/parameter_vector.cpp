#include "common/comm/parameter_vector.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/from_blob.h>

#include <cstring>

#include "common/support/errors.h"

namespace kvrl {

std::vector<float> flatten_parameters(const std::vector<at::Tensor>& parameters) {
  int64_t numel = 0;
  for (const auto& p : parameters) numel += p.numel();
  std::vector<float> values(static_cast<size_t>(numel));
  float* cursor = values.data();
  for (const auto& p : parameters) {
    const at::Tensor contiguous = p.detach().to(at::kCPU, at::kFloat).contiguous();
    std::memcpy(cursor, contiguous.data_ptr<float>(), contiguous.numel() * sizeof(float));
    cursor += contiguous.numel();
  }
  return values;
}

void assign_parameters(std::span<const float> values, std::vector<at::Tensor>& parameters) {
  int64_t numel = 0;
  for (const auto& p : parameters) numel += p.numel();
  if (numel != static_cast<int64_t>(values.size())) {
    throw InvalidArgumentError("assign_parameters: " + std::to_string(values.size()) + " values for " +
                               std::to_string(numel) + " parameter elements");
  }
  assign_parameters(at::from_blob(const_cast<float*>(values.data()), {numel}, at::kFloat), parameters);
}

void assign_parameters(const at::Tensor& flat, std::vector<at::Tensor>& parameters) {
  int64_t numel = 0;
  for (const auto& p : parameters) numel += p.numel();
  if (flat.dim() != 1 || flat.numel() < numel) {
    throw InvalidArgumentError("assign_parameters: a vector of " + c10::str(flat.sizes()) + " for " +
                               std::to_string(numel) + " parameter elements");
  }
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (auto& p : parameters) {
    p.copy_(flat.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
}

}  // namespace kvrl
