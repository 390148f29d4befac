// One pre-norm transformer block of CausalTransformer, with its window path (attending in
// query chunks over the key range a block-diagonal mask allows) and its cached-step path.
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

// A run of queries of a window and the keys that any of them may attend to under the
// window mask. Attending a query chunk over its key range only is exact (the keys left
// out are masked for every query in it) and skips the causal upper triangle, the
// other episodes of a packed row and the padding, which a full [T, T] attention computes.
struct AttentionChunk {
  int64_t query_begin = 0;
  int64_t query_count = 0;
  int64_t key_begin = 0;
  int64_t key_count = 0;
};

// The chunks of `query_chunk` queries of a bool window mask [B, T, T] (true = attend),
// each with the smallest key range holding every true entry of its rows (all keys for a
// chunk without any). One host copy of a [chunks, T] reduction.
std::vector<AttentionChunk> attention_chunks(const at::Tensor& mask, int64_t query_chunk);

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
  // undefined for plain causal attention. A masked window attends chunk by chunk when
  // `chunks` (from attention_chunks) is not empty. `rotary`: the window's position angles
  // when positions are rotary, else null. With `captured` it also hands out the window's
  // keys and values (cache prefill).
  at::Tensor forward(const at::Tensor& h, const at::Tensor& attn_mask,
                     const std::vector<AttentionChunk>& chunks = {}, const RotaryAngles* rotary = nullptr,
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
