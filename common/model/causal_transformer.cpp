#include "common/model/causal_transformer.h"

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/scaled_dot_product_attention.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/dropout.h>

#include <algorithm>
#include <string>

#include "common/model/episode_masks.h"
#include "common/model/rotary_embedding.h"
#include "common/model/window_attention.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

void require_positive(const char* name, int64_t value) {
  if (value <= 0) {
    throw InvalidArgumentError(std::string(name) + " (" + std::to_string(value) +
                               ") must be a positive integer.");
  }
}

}  // namespace

void CausalTransformerOptions::validate() const {
  require_positive("input_size", input_size);
  require_positive("hidden_size", hidden_size);
  require_positive("num_layers", num_layers);
  require_positive("num_heads", num_heads);
  require_positive("max_seq_len", max_seq_len);
  if (hidden_size % num_heads != 0) {
    throw InvalidArgumentError("hidden_size (" + std::to_string(hidden_size) +
                               ") must be divisible by num_heads (" + std::to_string(num_heads) + ").");
  }
  if (dim_feedforward) require_positive("dim_feedforward", *dim_feedforward);
  if (!(dropout >= 0.0 && dropout < 1.0)) {
    throw InvalidArgumentError("dropout (" + std::to_string(dropout) + ") must be in [0, 1).");
  }
  if (attention_window < 0 || attention_window > max_seq_len) {
    throw InvalidArgumentError("attention_window (" + std::to_string(attention_window) +
                               ") must be in [0, max_seq_len=" + std::to_string(max_seq_len) +
                               "] (0: attend to the whole context).");
  }
  if (attention_window > 0 && positions == PositionEncoding::kLearned) {
    throw InvalidArgumentError("attention_window (" + std::to_string(attention_window) +
                               ") needs rotary positions: learned absolute positions cannot slide past "
                               "max_seq_len.");
  }
  if (positions == PositionEncoding::kRotary && (hidden_size / num_heads) % 2 != 0) {
    throw InvalidArgumentError("rotary positions need an even head size; hidden_size / num_heads = " +
                               std::to_string(hidden_size / num_heads) + ".");
  }
}

CausalTransformer::CausalTransformer(const CausalTransformerOptions& options,
                                     std::optional<c10::Device> device)
    : options_(options) {
  options_.validate();
  in_proj_ = register_module("in_proj", torch::nn::Linear(options_.input_size, options_.hidden_size));
  if (options_.positions == PositionEncoding::kLearned) {
    pos_emb_ = register_module("pos_emb", torch::nn::Embedding(options_.max_seq_len, options_.hidden_size));
  }
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.num_layers; ++i) {
    TransformerBlock block(options_.hidden_size, options_.num_heads, options_.feedforward_size(),
                           options_.dropout);
    blocks_->push_back(block);
    block_list_.push_back(block);
  }
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options_.hidden_size})));
  if (device) to(*device);
}

int64_t CausalTransformer::check_positions(const at::Tensor& positions) const {
  // One host sync per call, as in the reference; the cached step reuses the value to
  // size its attention.
  const int64_t max_position = positions.max().item<int64_t>();
  if (options_.attention_window == 0 && max_position >= options_.max_seq_len) {
    throw sequence_too_long(options_.max_seq_len);
  }
  return max_position;
}

void CausalTransformer::check_inputs(const at::Tensor& features, const at::Tensor& positions) const {
  if (features.dim() != 3 || features.size(-1) != options_.input_size) {
    throw InvalidArgumentError(
        "features must have shape [B, T, input_size=" + std::to_string(options_.input_size) + "], got " +
        c10::str(features.sizes()) + ".");
  }
  if (positions.sizes() != features.sizes().slice(0, 2)) {
    throw InvalidArgumentError(
        "positions must have shape [B, T] = " + c10::str(features.sizes().slice(0, 2)) + ", got " +
        c10::str(positions.sizes()) + ".");
  }
}

BackboneOutput CausalTransformer::forward(const at::Tensor& features, const at::Tensor& positions,
                                          const std::optional<at::Tensor>& mask,
                                          std::shared_ptr<KvCache> kv_cache) {
  check_inputs(features, positions);
  const int64_t max_position = check_positions(positions);
  at::Tensor h = embed(features, positions);
  if (!kv_cache) {
    const int64_t t = features.size(1);
    // Without a mask and a sliding window, plain causal attention: the fused causal kernel,
    // which materialises no [T, T] mask and skips the upper triangle.
    const bool plain_causal = !mask && options_.attention_window == 0 && options_.tiled_attention;
    const at::Tensor window_mask =
        mask ? *mask
             : (plain_causal ? at::Tensor() : causal_window_mask(features.size(0), t, features.options()));
    // Planned once for all layers: they share the mask.
    const std::optional<WindowAttention> tiled =
        options_.tiled_attention && window_mask.defined() && window_mask.scalar_type() == at::kBool &&
                window_mask.dim() == 3 && t > kWindowAttentionQueryTile
            ? WindowAttention::plan(window_mask, kWindowAttentionQueryTile)
            : std::nullopt;
    return window_blocks(std::move(h), positions,
                         window_mask.defined() ? window_mask.unsqueeze(-3) : at::Tensor(),
                         tiled ? &*tiled : nullptr);
  }
  if (features.size(1) != 1) {
    throw InvalidArgumentError(
        "The cached-step path expects a single step (T==1), got T=" + std::to_string(features.size(1)) +
        ". Pass kv_cache=None to process a window.");
  }
  CausalTransformerKvCache& cache = cache_of(kv_cache.get(), features.size(0));
  BackboneOutput out = forward_cached_step(std::move(h), positions.squeeze(-1), max_position, cache);
  out.kv_cache = std::move(kv_cache);
  return out;
}

BackboneOutput CausalTransformer::forward_packed(const at::Tensor& features, const at::Tensor& positions,
                                                 const at::Tensor& is_init) {
  // A sliding window's band goes through the mask and its tiles.
  if (!options_.tiled_attention || options_.attention_window > 0) {
    return forward(features, positions, segment_causal_mask_from_is_init(is_init, options_.attention_window),
                   nullptr);
  }
  check_inputs(features, positions);
  if (is_init.sizes() != positions.sizes()) {
    throw InvalidArgumentError("is_init must have shape [B, T] = " + c10::str(positions.sizes()) + ", got " +
                               c10::str(is_init.sizes()) + ".");
  }
  check_positions(positions);
  const SegmentAttention contexts(is_init);
  // Rows of one context each: plain causal attention, no gathering.
  return window_blocks(embed(features, positions), positions, at::Tensor(),
                       contexts.one_context_per_row() ? nullptr : &contexts);
}

BackboneOutput CausalTransformer::window_blocks(at::Tensor h, const at::Tensor& positions,
                                                const at::Tensor& attn_mask,
                                                const PlannedAttention* planned) {
  const std::optional<RotaryAngles> rotary = rotary_angles_of(positions, h.scalar_type());
  for (auto& block : block_list_) h = block->forward(h, attn_mask, planned, rotary ? &*rotary : nullptr);
  return {norm_->forward(h), nullptr};
}

CausalTransformerKvCache& CausalTransformer::cache_of(KvCache* kv_cache, int64_t batch_size) const {
  auto* cache = dynamic_cast<CausalTransformerKvCache*>(kv_cache);
  if (cache == nullptr) {
    throw InvalidArgumentError("kv_cache was not made by CausalTransformer::new_kv_cache.");
  }
  if (cache->keys.size(0) != batch_size) {
    throw InvalidArgumentError("kv_cache holds " + std::to_string(cache->keys.size(0)) +
                               " streams but the batch has " + std::to_string(batch_size) + ".");
  }
  return *cache;
}

void CausalTransformer::prefill_kv_cache(const at::Tensor& features, const at::Tensor& lengths,
                                         KvCache& kv_cache) {
  if (features.dim() != 3 || features.size(-1) != options_.input_size) {
    throw InvalidArgumentError(
        "prefill features must have shape [B, T, input_size=" + std::to_string(options_.input_size) +
        "], got " + c10::str(features.sizes()) + ".");
  }
  CausalTransformerKvCache& cache = cache_of(&kv_cache, features.size(0));
  const int64_t t = features.size(1);
  if (t == 0) return;
  const at::Tensor positions =
      at::arange(t, features.options().dtype(at::kLong)).expand({features.size(0), t});
  check_positions(positions);
  torch::NoGradGuard no_grad;
  at::Tensor h = embed(features, positions);
  const std::optional<RotaryAngles> rotary = rotary_angles_of(positions, h.scalar_type());
  // Every row starts its context at slot 0, so the mask is plain causal (undefined: the
  // fused kernel), banded when the window slides.
  const at::Tensor attn_mask = options_.attention_window > 0
                                   ? causal_window_mask(features.size(0), t, features.options()).unsqueeze(1)
                                   : at::Tensor();
  const at::Tensor host_lengths = lengths.to(at::kCPU);
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    at::Tensor layer_keys = cache.keys.select(1, layer);
    at::Tensor layer_values = cache.values.select(1, layer);
    WindowKeysValues window;
    h = block_list_[layer]->forward(h, attn_mask, /*planned=*/nullptr, rotary ? &*rotary : nullptr, &window);
    store_prefill(window, host_lengths, layer_keys, layer_values);
  }
  cache.high_water = std::max(cache.high_water, std::min(t, options_.cache_slots()));
}

// Under autocast the cache keeps its own dtype: the copy casts on write, as the step does.
void CausalTransformer::store_prefill(const WindowKeysValues& window, const at::Tensor& lengths,
                                      at::Tensor& layer_keys, at::Tensor& layer_values) const {
  const int64_t t = window.keys.size(2);
  if (options_.attention_window == 0) {
    layer_keys.narrow(/*dim=*/2, 0, t).copy_(window.keys);
    layer_values.narrow(/*dim=*/2, 0, t).copy_(window.values);
    return;
  }
  // A ring keeps each row's last W steps; a row's padding must not overwrite any of them.
  const int64_t slots = options_.cache_slots();
  std::vector<int64_t> rows, steps, ring_slots;
  const auto length_of = lengths.accessor<int64_t, 1>();
  for (int64_t row = 0; row < length_of.size(0); ++row) {
    for (int64_t step = std::max<int64_t>(0, length_of[row] - slots); step < length_of[row]; ++step) {
      rows.push_back(row);
      steps.push_back(step);
      ring_slots.push_back(step % slots);
    }
  }
  if (rows.empty()) return;
  const auto index_options = at::TensorOptions().dtype(at::kLong).device(layer_keys.device());
  const at::Tensor row_index = at::tensor(rows, index_options);
  const at::Tensor step_index = at::tensor(steps, index_options);
  const at::Tensor slot_index = at::tensor(ring_slots, index_options);
  using at::indexing::Slice;
  layer_keys.index_put_({row_index, Slice(), slot_index},
                        window.keys.index({row_index, Slice(), step_index}).to(layer_keys.scalar_type()));
  layer_values.index_put_(
      {row_index, Slice(), slot_index},
      window.values.index({row_index, Slice(), step_index}).to(layer_values.scalar_type()));
}

at::Tensor CausalTransformer::embed(const at::Tensor& features, const at::Tensor& positions) {
  at::Tensor h = in_proj_->forward(features);
  return pos_emb_ ? h + pos_emb_->forward(positions) : h;
}

std::optional<RotaryAngles> CausalTransformer::rotary_angles_of(const at::Tensor& positions,
                                                                c10::ScalarType dtype) const {
  if (options_.positions != PositionEncoding::kRotary) return std::nullopt;
  return rotary_angles(positions, head_dim(), dtype);
}

at::Tensor CausalTransformer::causal_window_mask(int64_t batch, int64_t steps,
                                                 const at::TensorOptions& options) const {
  at::Tensor mask = at::ones({steps, steps}, options.dtype(at::kBool)).tril();
  if (options_.attention_window > 0) mask = mask.triu(-(options_.attention_window - 1));
  return mask.expand({batch, steps, steps});
}

at::Tensor CausalTransformer::static_step(const at::Tensor& features, const at::Tensor& positions,
                                          KvCache& kv_cache) {
  CausalTransformerKvCache& cache = cache_of(&kv_cache, features.size(0));
  torch::NoGradGuard no_grad;
  at::Tensor h = embed(features, positions.unsqueeze(-1));
  // The whole cache length, whatever the positions: shapes must not depend on values.
  return forward_cached_step(std::move(h), positions, options_.cache_slots() - 1, cache).out;
}

at::Tensor CausalTransformer::stream_step(const at::Tensor& features, const at::Tensor& positions,
                                          const at::Tensor& rows, KvCache& kv_cache) {
  auto* cache = dynamic_cast<CausalTransformerKvCache*>(&kv_cache);
  if (cache == nullptr) {
    throw InvalidArgumentError("kv_cache was not made by CausalTransformer::new_kv_cache.");
  }
  if (features.dim() != 3 || features.size(1) != 1 || features.size(-1) != options_.input_size ||
      positions.sizes() != features.sizes().slice(0, 1) || rows.sizes() != positions.sizes()) {
    throw InvalidArgumentError(
        "stream_step expects features [S, 1, input_size=" + std::to_string(options_.input_size) +
        "], positions [S] and rows [S], got " + c10::str(features.sizes()) + ", " +
        c10::str(positions.sizes()) + " and " + c10::str(rows.sizes()) + ".");
  }
  torch::NoGradGuard no_grad;
  const int64_t max_position = check_positions(positions);
  at::Tensor h = embed(features, positions.unsqueeze(-1));
  return forward_cached_step(std::move(h), positions, max_position, *cache, rows).out;
}

std::shared_ptr<KvCache> CausalTransformer::resize_kv_cache(const KvCache& kv_cache, int64_t batch_size) {
  const auto* old = dynamic_cast<const CausalTransformerKvCache*>(&kv_cache);
  if (old == nullptr) {
    throw InvalidArgumentError("kv_cache was not made by CausalTransformer::new_kv_cache.");
  }
  auto grown = std::static_pointer_cast<CausalTransformerKvCache>(
      new_kv_cache(batch_size, old->keys.device(), old->keys.scalar_type()));
  const int64_t kept = std::min(batch_size, old->keys.size(0));
  grown->keys.narrow(0, 0, kept).copy_(old->keys.narrow(0, 0, kept));
  grown->values.narrow(0, 0, kept).copy_(old->values.narrow(0, 0, kept));
  grown->high_water = old->high_water;
  return grown;
}

BackboneOutput CausalTransformer::forward_cached_step(at::Tensor h, const at::Tensor& positions,
                                                      int64_t max_position, CausalTransformerKvCache& cache,
                                                      const at::Tensor& rows) {
  const int64_t slots = options_.cache_slots();
  const int64_t context = std::min(max_position + 1, slots);
  cache.high_water = std::max(cache.high_water, context);
  // Slot s holds a step of the context once the stream's position reached s; a full ring
  // (position >= W - 1) holds the last W steps, each in slot position mod W.
  const at::Tensor valid = at::arange(context, positions.options()) <= positions.view({-1, 1});
  const at::Tensor attn_mask = valid.view({-1, 1, 1, context});
  const bool rows_are_all = !rows.defined();
  const at::Tensor batch_index = rows_are_all ? at::arange(h.size(0), positions.options()) : rows;
  const at::Tensor write_slots = options_.attention_window > 0 ? positions.remainder(slots) : positions;
  const std::optional<RotaryAngles> rotary = rotary_angles_of(positions.view({-1, 1}), h.scalar_type());
  for (int64_t layer = 0; layer < options_.num_layers; ++layer) {
    at::Tensor layer_keys = cache.keys.select(1, layer);
    at::Tensor layer_values = cache.values.select(1, layer);
    h = block_list_[layer]->forward_cached(h, attn_mask, layer_keys, layer_values, batch_index, rows_are_all,
                                           write_slots, context, rotary ? &*rotary : nullptr);
  }
  return {norm_->forward(h), nullptr};
}

std::shared_ptr<KvCache> CausalTransformer::new_kv_cache(int64_t batch_size,
                                                         std::optional<c10::Device> device,
                                                         std::optional<c10::ScalarType> dtype) {
  require_positive("batch_size", batch_size);
  const at::Tensor& weight = block_list_.front()->named_parameters()["qkv.weight"];
  auto tensor_options = weight.options()
                            .device(device.value_or(weight.device()))
                            .dtype(dtype.value_or(weight.scalar_type()))
                            .requires_grad(false);
  auto cache = std::make_shared<CausalTransformerKvCache>();
  const std::vector<int64_t> shape{batch_size, num_layers(), num_heads(), options_.cache_slots(), head_dim()};
  cache->keys = at::zeros(shape, tensor_options);
  cache->values = at::zeros(shape, tensor_options);
  return cache;
}

std::shared_ptr<KvCache> CausalTransformer::reset_kv_cache(std::shared_ptr<KvCache> kv_cache,
                                                           const at::Tensor& mask) {
  auto* cache = dynamic_cast<CausalTransformerKvCache*>(kv_cache.get());
  if (cache == nullptr) {
    throw InvalidArgumentError("kv_cache was not made by CausalTransformer::new_kv_cache.");
  }
  if (mask.scalar_type() != at::kBool || mask.numel() != cache->keys.size(0)) {
    throw InvalidArgumentError("reset mask must be a bool tensor of " + std::to_string(cache->keys.size(0)) +
                               " elements, got " + c10::str(mask.scalar_type(), mask.sizes()) + ".");
  }
  if (cache->high_water == 0) return kv_cache;  // nothing written yet: already zero
  const at::Tensor rows = mask.reshape(-1).nonzero().squeeze(-1);
  if (rows.numel() > 0) {
    // Slots at or past high_water were never written, so zeroing the prefix clears the row.
    cache->keys.narrow(/*dim=*/3, 0, cache->high_water).index_fill_(0, rows, 0);
    cache->values.narrow(/*dim=*/3, 0, cache->high_water).index_fill_(0, rows, 0);
  }
  return kv_cache;
}

std::shared_ptr<torch::nn::Module> CausalTransformer::clone(
    const std::optional<torch::Device>& device) const {
  const at::Tensor& weight = block_list_.front()->named_parameters()["qkv.weight"];
  auto copy = std::make_shared<CausalTransformer>(options_);
  copy->to(device.value_or(weight.device()), weight.scalar_type());
  copy->train(is_training());
  torch::NoGradGuard no_grad;
  auto source = named_parameters();
  for (auto& item : copy->named_parameters()) item.value().copy_(source[item.key()]);
  auto source_buffers = named_buffers();
  for (auto& item : copy->named_buffers()) item.value().copy_(source_buffers[item.key()]);
  return copy;
}

}  // namespace kvrl
