// Collectives move tensors in a few large flat buffers rather than one message per
// tensor: tensors are grouped, in order, into buckets of at most `bucket_bytes` (a
// larger tensor gets a bucket of its own), each of one dtype on one device.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace kvrl {

struct TensorBucket {
  std::vector<size_t> members;  // indices into the planned tensors, in order
  int64_t numel = 0;
};

// Throws InvalidArgumentError when bucket_bytes < 1.
std::vector<TensorBucket> plan_buckets(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes);
// The bucket's tensors as one contiguous 1-d buffer (on their device, in their dtype).
at::Tensor flatten_bucket(const TensorBucket& bucket, const std::vector<at::Tensor>& tensors);
// Copies `flat` back into the bucket's tensors.
void unflatten_bucket(const at::Tensor& flat, const TensorBucket& bucket, std::vector<at::Tensor>& tensors);

}  // namespace kvrl
