// A module's parameters as one flat float32 vector, in parameter order, and back: what
// the weight messages carry.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace kvrl {

std::vector<float> flatten_parameters(const std::vector<at::Tensor>& parameters);
// Copies `values` into `parameters` (same order and total size; checked).
void assign_parameters(std::span<const float> values, std::vector<at::Tensor>& parameters);
// The same from the first elements of a 1-d float tensor on any device (the rest, e.g. a
// trailing version, is ignored); copies stay on the device when the parameters are there.
void assign_parameters(const at::Tensor& flat, std::vector<at::Tensor>& parameters);

// CRC-32 of the parameters' float32 bytes in order, as 8 hex digits: equal weights, equal
// checksums, wherever the parameters live.
std::string parameter_checksum(const std::vector<at::Tensor>& parameters);

// The checksum of each policy version a rank sent or applied, for the accounting that
// every actor acts with learner 0's weights (rank<N>.json). Keeps the first
// kMaxVersions; later versions are counted, not kept, so a long run's report stays small.
class WeightChecksumLog {
 public:
  static constexpr size_t kMaxVersions = 2048;
  void record(int64_t policy_version, const std::vector<at::Tensor>& parameters);
  const std::vector<std::pair<int64_t, std::string>>& entries() const { return entries_; }
  int64_t versions_not_kept() const { return versions_not_kept_; }

 private:
  std::vector<std::pair<int64_t, std::string>> entries_;
  int64_t versions_not_kept_ = 0;
};

}  // namespace kvrl
