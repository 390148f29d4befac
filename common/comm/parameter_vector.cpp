#include "common/comm/parameter_vector.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/from_blob.h>

#include <cstdio>
#include <cstring>

#include "common/support/errors.h"
#include "common/wire/crc32.h"

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

std::string parameter_checksum(const std::vector<at::Tensor>& parameters) {
  uint32_t crc = 0;
  for (const auto& p : parameters) {
    const at::Tensor values = p.detach().to(at::kCPU, at::kFloat).contiguous();
    crc = crc32(values.data_ptr<float>(), values.numel() * sizeof(float), crc);
  }
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  return hex;
}

void WeightChecksumLog::record(int64_t policy_version, const std::vector<at::Tensor>& parameters) {
  if (entries_.size() >= kMaxVersions) {
    ++versions_not_kept_;
    return;
  }
  entries_.emplace_back(policy_version, parameter_checksum(parameters));
}

}  // namespace kvrl
