#include "common/model/transformer_block.h"

#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>

#include <algorithm>
#include <string>

#include "common/model/rotary_embedding.h"
#include "common/model/window_attention.h"
#include "common/support/errors.h"

namespace kvrl {

TransformerBlockImpl::TransformerBlockImpl(int64_t hidden_size, int64_t num_heads, int64_t dim_feedforward,
                                           double dropout)
    : num_heads_(num_heads), head_dim_(hidden_size / num_heads) {
  norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden_size})));
  qkv_ = register_module(
      "qkv", torch::nn::Linear(torch::nn::LinearOptions(hidden_size, 3 * hidden_size).bias(false)));
  out_proj_ = register_module("out_proj", torch::nn::Linear(hidden_size, hidden_size));
  norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden_size})));
  mlp_ = register_module(
      "mlp",
      torch::nn::Sequential(torch::nn::Linear(hidden_size, dim_feedforward), torch::nn::GELU(),
                            torch::nn::Linear(dim_feedforward, hidden_size), torch::nn::Dropout(dropout)));
}

at::Tensor TransformerBlockImpl::forward(const at::Tensor& h, const at::Tensor& attn_mask,
                                         const PlannedAttention* planned, const RotaryAngles* rotary,
                                         WindowKeysValues* captured) {
  const int64_t batch = h.size(0);
  const int64_t t = h.size(1);
  auto qkv = qkv_->forward(norm1_->forward(h)).chunk(3, /*dim=*/-1);
  auto heads = [&](const at::Tensor& x) { return x.view({batch, t, num_heads_, head_dim_}).transpose(1, 2); };
  const at::Tensor queries = rotary ? apply_rotary(heads(qkv[0]), *rotary) : heads(qkv[0]);
  const at::Tensor keys = rotary ? apply_rotary(heads(qkv[1]), *rotary) : heads(qkv[1]);
  const at::Tensor values = heads(qkv[2]);
  if (captured != nullptr) *captured = {keys.detach(), values.detach()};
  if (planned != nullptr) return attend(h, (*planned)(queries, keys, values));
  // An undefined mask means plain causal attention, which lets SDPA pick its fused
  // causal kernel instead of materialising a [B, heads, T, T] mask.
  if (!attn_mask.defined()) {
    return attend(h, at::scaled_dot_product_attention(queries, keys, values, /*attn_mask=*/std::nullopt,
                                                      /*dropout_p=*/0.0, /*is_causal=*/true));
  }
  return attend(h, at::scaled_dot_product_attention(queries, keys, values, attn_mask));
}

at::Tensor TransformerBlockImpl::forward_cached(const at::Tensor& h, const at::Tensor& attn_mask,
                                                at::Tensor& layer_keys, at::Tensor& layer_values,
                                                const at::Tensor& rows, bool rows_are_all,
                                                const at::Tensor& slots, int64_t context,
                                                const RotaryAngles* rotary) {
  const int64_t batch = h.size(0);
  auto qkv = qkv_->forward(norm1_->forward(h)).chunk(3, /*dim=*/-1);
  // One step per stream: [B, 1, hidden] -> [B, heads, head_dim] for the cache write.
  auto step_heads = [&](const at::Tensor& x) { return x.reshape({batch, num_heads_, head_dim_}); };
  auto heads = [&](const at::Tensor& x) { return x.view({batch, 1, num_heads_, head_dim_}).transpose(1, 2); };
  const at::Tensor q = rotary ? apply_rotary(heads(qkv[0]), *rotary) : heads(qkv[0]);
  const at::Tensor k = rotary ? apply_rotary(heads(qkv[1]), *rotary) : heads(qkv[1]);
  using at::indexing::Slice;
  layer_keys.index_put_({rows, Slice(), slots}, step_heads(k).detach().to(layer_keys.scalar_type()));
  layer_values.index_put_({rows, Slice(), slots}, step_heads(qkv[2]).detach().to(layer_values.scalar_type()));
  // Slots past `context` are masked out for every stream, so leaving them out of the
  // attention changes no output and makes the step cost follow the context in use.
  auto context_of = [&](const at::Tensor& layer) {
    const at::Tensor used = layer.narrow(/*dim=*/2, 0, context);
    return (rows_are_all ? used : used.index_select(0, rows)).to(q.scalar_type());
  };
  const at::Tensor keys = context_of(layer_keys);
  const at::Tensor values = context_of(layer_values);
  return attend(h, at::scaled_dot_product_attention(q, keys, values, attn_mask));
}

at::Tensor TransformerBlockImpl::attend(const at::Tensor& h, const at::Tensor& attention) {
  at::Tensor out = h + out_proj_->forward(attention.transpose(1, 2).flatten(-2));
  return out + mlp_->forward(norm2_->forward(out));
}

}  // namespace kvrl
