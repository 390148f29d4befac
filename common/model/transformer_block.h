// One pre-norm transformer block of CausalTransformer, with its window path (attending
// where the window mask allows, common/model/window_attention.h) and its cached-step path.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <vector>

namespace kvrl {

struct RotaryAngles;
class PlannedAttention;

// A window's keys and values as a block computed them (keys rotated where positions are
// rotary), [B, heads, T, head_dim], for a cache prefill to store.
struct WindowKeysValues {
  at::Tensor keys;
  at::Tensor values;
};

class TransformerBlockImpl : public torch::nn::Module {
 public:
  TransformerBlockImpl(int64_t hidden_size, int64_t num_heads, int64_t dim_feedforward, double dropout);

  // Window path: h [B, T, hidden], attn_mask broadcastable to [B, heads, T, T], or
  // undefined for plain causal attention. With `planned` (common/model/window_attention.h,
  // for the same window) the window attends as planned instead, the mask unused. `rotary`:
  // the window's position angles when positions are rotary, else null. With `captured` it
  // also hands out the window's keys and values (cache prefill).
  at::Tensor forward(const at::Tensor& h, const at::Tensor& attn_mask,
                     const PlannedAttention* planned = nullptr, const RotaryAngles* rotary = nullptr,
                     WindowKeysValues* captured = nullptr);

  // Cached-step path for S streams: writes this step's keys and values into
  // layer_keys/layer_values ([cache streams, heads, cache slots, head_dim]) at (rows, slots),
  // then attends over the first `context` slots of those rows under attn_mask
  // [S, 1, 1, context]. `rows_are_all`: rows is every cache row in order (no gather needed).
  // `rotary`: this step's angles.
  at::Tensor forward_cached(const at::Tensor& h, const at::Tensor& attn_mask, at::Tensor& layer_keys,
                            at::Tensor& layer_values, const at::Tensor& rows, bool rows_are_all,
                            const at::Tensor& slots, int64_t context, const RotaryAngles* rotary);

 private:
  at::Tensor attend(const at::Tensor& h, const at::Tensor& attention);

  int64_t num_heads_;
  int64_t head_dim_;
  torch::nn::LayerNorm norm1_{nullptr};
  torch::nn::Linear qkv_{nullptr};
  torch::nn::Linear out_proj_{nullptr};
  torch::nn::LayerNorm norm2_{nullptr};
  torch::nn::Sequential mlp_{nullptr};
};
TORCH_MODULE(TransformerBlock);

}  // namespace kvrl
