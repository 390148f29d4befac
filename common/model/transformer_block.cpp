#include "common/model/transformer_block.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>

#include <algorithm>
#include <string>

#include "common/model/rotary_embedding.h"
#include "common/support/errors.h"

namespace kvrl {

std::vector<AttentionChunk> attention_chunks(const at::Tensor& mask, int64_t query_chunk) {
  if (mask.dim() != 3 || mask.size(-1) != mask.size(-2) || mask.scalar_type() != at::kBool) {
    throw InvalidArgumentError("attention_chunks expects a bool mask [B, T, T], got " +
                               c10::str(mask.scalar_type(), mask.sizes()) + ".");
  }
  if (query_chunk <= 0) {
    throw InvalidArgumentError("query_chunk (" + std::to_string(query_chunk) +
                               ") must be a positive integer.");
  }
  const int64_t t = mask.size(-1);
  const int64_t count = (t + query_chunk - 1) / query_chunk;
  // [chunks, T]: whether any query of the chunk, in any row, may attend to each key.
  const at::Tensor needed = at::constant_pad_nd(mask.any(/*dim=*/0), {0, 0, 0, count * query_chunk - t}, 0)
                                .view({count, query_chunk, t})
                                .any(/*dim=*/1)
                                .to(at::kCPU);
  const auto keys = needed.accessor<bool, 2>();
  std::vector<AttentionChunk> chunks;
  chunks.reserve(static_cast<size_t>(count));
  for (int64_t chunk = 0; chunk < count; ++chunk) {
    int64_t first = 0;
    while (first < t && !keys[chunk][first]) ++first;
    int64_t last = t - 1;
    while (last > first && !keys[chunk][last]) --last;
    const int64_t begin = chunk * query_chunk;
    const int64_t rows = std::min(query_chunk, t - begin);
    // A chunk with no allowed key keeps every key, so its fully masked rows come out of
    // the kernel exactly as they would unchunked.
    chunks.push_back(first == t ? AttentionChunk{begin, rows, 0, t}
                                : AttentionChunk{begin, rows, first, last - first + 1});
  }
  return chunks;
}

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
                                         const std::vector<AttentionChunk>& chunks,
                                         const RotaryAngles* rotary, WindowKeysValues* captured) {
  const int64_t batch = h.size(0);
  const int64_t t = h.size(1);
  auto qkv = qkv_->forward(norm1_->forward(h)).chunk(3, /*dim=*/-1);
  auto heads = [&](const at::Tensor& x) { return x.view({batch, t, num_heads_, head_dim_}).transpose(1, 2); };
  const at::Tensor queries = rotary ? apply_rotary(heads(qkv[0]), *rotary) : heads(qkv[0]);
  const at::Tensor keys = rotary ? apply_rotary(heads(qkv[1]), *rotary) : heads(qkv[1]);
  const at::Tensor values = heads(qkv[2]);
  if (captured != nullptr) *captured = {keys.detach(), values.detach()};
  // An undefined mask means plain causal attention, which lets SDPA pick its fused
  // causal kernel instead of materialising a [B, heads, T, T] mask.
  if (!attn_mask.defined()) {
    return attend(h, at::scaled_dot_product_attention(queries, keys, values, /*attn_mask=*/std::nullopt,
                                                      /*dropout_p=*/0.0, /*is_causal=*/true));
  }
  if (chunks.size() <= 1)
    return attend(h, at::scaled_dot_product_attention(queries, keys, values, attn_mask));
  std::vector<at::Tensor> parts;
  parts.reserve(chunks.size());
  for (const AttentionChunk& chunk : chunks) {
    auto keys_of = [&](const at::Tensor& x) { return x.narrow(/*dim=*/2, chunk.key_begin, chunk.key_count); };
    parts.push_back(at::scaled_dot_product_attention(
        queries.narrow(/*dim=*/2, chunk.query_begin, chunk.query_count), keys_of(keys), keys_of(values),
        attn_mask.narrow(/*dim=*/-2, chunk.query_begin, chunk.query_count)
            .narrow(/*dim=*/-1, chunk.key_begin, chunk.key_count)));
  }
  return attend(h, at::cat(parts, /*dim=*/2));
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
