#include "common/comm/gradient_buckets.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/cat.h>

#include "common/support/errors.h"

namespace kvrl {

std::vector<TensorBucket> plan_buckets(const std::vector<at::Tensor>& tensors, int64_t bucket_bytes) {
  if (bucket_bytes < 1)
    throw InvalidArgumentError("bucket size " + std::to_string(bucket_bytes) + " must be >= 1 byte");
  std::vector<TensorBucket> buckets;
  int64_t bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor& t = tensors[i];
    const int64_t size = static_cast<int64_t>(t.numel() * t.element_size());
    const bool same_kind = !buckets.empty() &&
                           tensors[buckets.back().members.front()].scalar_type() == t.scalar_type() &&
                           tensors[buckets.back().members.front()].device() == t.device();
    if (buckets.empty() || !same_kind || bytes + size > bucket_bytes) {
      buckets.emplace_back();
      bytes = 0;
    }
    buckets.back().members.push_back(i);
    buckets.back().numel += t.numel();
    bytes += size;
  }
  return buckets;
}

at::Tensor flatten_bucket(const TensorBucket& bucket, const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  flat.reserve(bucket.members.size());
  for (size_t i : bucket.members) flat.push_back(tensors[i].detach().reshape(-1));
  return at::cat(flat).contiguous();
}

void unflatten_bucket(const at::Tensor& flat, const TensorBucket& bucket, std::vector<at::Tensor>& tensors) {
  at::NoGradGuard no_grad;
  int64_t offset = 0;
  for (size_t i : bucket.members) {
    at::Tensor& t = tensors[i];
    t.copy_(flat.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

}  // namespace kvrl
