#include "common/model/backbone.h"

#include <ATen/ops/full.h>
#include <ATen/ops/ones.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "common/model/episode_masks.h"
#include "common/support/errors.h"

namespace kvrl {

BackboneOutput Backbone::forward_packed(const at::Tensor& features, const at::Tensor& positions,
                                        const at::Tensor& is_init) {
  return forward(features, positions, segment_causal_mask_from_is_init(is_init, attention_window()), nullptr);
}

void Backbone::prefill_kv_cache(const at::Tensor& features, const at::Tensor& lengths, KvCache& kv_cache) {
  torch::NoGradGuard no_grad;
  const int64_t batch = features.size(0);
  // forward() takes the cache by shared_ptr; this one is owned by the caller.
  std::shared_ptr<KvCache> cache(std::shared_ptr<KvCache>(), &kv_cache);
  cache = reset_kv_cache(cache, at::ones({batch}, features.options().dtype(at::kBool)));
  const int64_t steps = lengths.numel() > 0 ? lengths.max().item<int64_t>() : 0;
  for (int64_t t = 0; t < steps; ++t) {
    const at::Tensor positions = at::full({batch, 1}, t, features.options().dtype(at::kLong));
    forward(features.narrow(1, t, 1), positions, std::nullopt, cache);
  }
}

at::Tensor Backbone::static_step(const at::Tensor&, const at::Tensor&, KvCache&) {
  throw InvalidArgumentError("this backbone has no static-shape cached step (has_static_step() is false)");
}

at::Tensor Backbone::stream_step(const at::Tensor&, const at::Tensor&, const at::Tensor&, KvCache&) {
  throw InvalidArgumentError(
      "this backbone cannot step a subset of its streams (has_stream_steps() is false)");
}

std::shared_ptr<KvCache> Backbone::resize_kv_cache(const KvCache&, int64_t) {
  throw InvalidArgumentError("this backbone cannot resize its cache (has_stream_steps() is false)");
}

}  // namespace kvrl
