// CausalTransformer: the reference backbone (a pre-norm causal transformer with learned
// positions), ported with the reference's parameter names so state dicts move between
// Python and C++ by name. The window path trains on [B, T] windows; the cached-step
// path runs one step per call against a [B, num_layers, num_heads, max_seq_len, head_dim]
// key/value cache and attends only over the context in use, not all max_seq_len slots.
// Beyond the reference: rotary positions, and a sliding window of W steps whose cache is a
// ring of W slots per stream, so episodes of any length run in constant time and memory.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <optional>
#include <vector>

#include "common/model/backbone.h"
#include "common/model/transformer_block.h"

namespace kvrl {

struct RotaryAngles;
class PlannedAttention;

struct CausalTransformerOptions {
  int64_t input_size = 0;                  // number of input features
  int64_t hidden_size = 0;                 // residual stream width; divisible by num_heads
  int64_t num_layers = 1;                  // number of transformer blocks
  int64_t num_heads = 0;                   // attention heads
  int64_t max_seq_len = 0;                 // longest episode: positional table and cache size
  std::optional<int64_t> dim_feedforward;  // per-block MLP width; default 4 * hidden_size
  double dropout = 0.0;                    // dropout probability in the block MLPs
  PositionEncoding positions = PositionEncoding::kLearned;
  // 0: attend to the whole context (at most max_seq_len steps); W in [1, max_seq_len]:
  // attend to the last W steps only, with unbounded positions (rotary positions only).
  int64_t attention_window = 0;
  // Window attention that follows the episodes (common/model/window_attention.h): packed
  // windows (forward_packed) context by context through the fused causal kernel, or tile by
  // tile under a sliding window; a bool mask given to forward() tile by tile; no mask, plain
  // causal. false: one whole-window masked call, as the reference does (for benchmarks, and
  // as the oracle of the faster paths).
  bool tiled_attention = true;

  // Throws InvalidArgumentError naming the first bad field.
  void validate() const;
  int64_t feedforward_size() const { return dim_feedforward.value_or(4 * hidden_size); }
  // Key/value slots per stream: the window, else max_seq_len.
  int64_t cache_slots() const { return attention_window > 0 ? attention_window : max_seq_len; }
};

// The reference cache: keys and values of every layer, zero where nothing was written.
// `high_water` is one past the highest slot written since the cache was made, so resets
// and reads touch only the slots in use. With a sliding window the slots are a ring:
// position p lives in slot p mod W.
struct CausalTransformerKvCache : KvCache {
  at::Tensor keys;    // [B, num_layers, num_heads, cache_slots, head_dim]
  at::Tensor values;  // same shape and dtype as keys
  int64_t high_water = 0;
};

class CausalTransformer : public Backbone {
 public:
  // Throws InvalidArgumentError when the options are invalid.
  explicit CausalTransformer(const CausalTransformerOptions& options,
                             std::optional<c10::Device> device = std::nullopt);

  using Backbone::forward;
  BackboneOutput forward(const at::Tensor& features, const at::Tensor& positions,
                         const std::optional<at::Tensor>& mask, std::shared_ptr<KvCache> kv_cache) override;
  // Context by context through the fused causal kernel (SegmentAttention), no mask built.
  BackboneOutput forward_packed(const at::Tensor& features, const at::Tensor& positions,
                                const at::Tensor& is_init) override;
  std::shared_ptr<KvCache> new_kv_cache(int64_t batch_size, std::optional<c10::Device> device,
                                        std::optional<c10::ScalarType> dtype) override;
  std::shared_ptr<KvCache> reset_kv_cache(std::shared_ptr<KvCache> kv_cache, const at::Tensor& mask) override;
  // One causal window over the steps instead of a replay, step by step.
  void prefill_kv_cache(const at::Tensor& features, const at::Tensor& lengths, KvCache& kv_cache) override;
  bool has_static_step() const override { return true; }
  at::Tensor static_step(const at::Tensor& features, const at::Tensor& positions, KvCache& kv_cache) override;
  bool has_stream_steps() const override { return true; }
  at::Tensor stream_step(const at::Tensor& features, const at::Tensor& positions, const at::Tensor& rows,
                         KvCache& kv_cache) override;
  std::shared_ptr<KvCache> resize_kv_cache(const KvCache& kv_cache, int64_t batch_size) override;

  int64_t num_layers() const override { return options_.num_layers; }
  int64_t num_heads() const override { return options_.num_heads; }
  int64_t head_dim() const override { return options_.hidden_size / options_.num_heads; }
  int64_t max_seq_len() const override { return options_.max_seq_len; }
  int64_t attention_window() const override { return options_.attention_window; }
  const CausalTransformerOptions& options() const { return options_; }

  // A deep copy with the same options, dtype and parameter values.
  std::shared_ptr<torch::nn::Module> clone(
      const std::optional<torch::Device>& device = std::nullopt) const override;

 private:
  // Returns the largest position; throws SequenceTooLongError at or beyond max_seq_len
  // unless the window slides.
  int64_t check_positions(const at::Tensor& positions) const;
  void check_inputs(const at::Tensor& features, const at::Tensor& positions) const;
  // The blocks and the final norm over an embedded window.
  BackboneOutput window_blocks(at::Tensor h, const at::Tensor& positions, const at::Tensor& attn_mask,
                               const PlannedAttention* planned);
  // The input projection, plus the learned position rows where positions are learned.
  at::Tensor embed(const at::Tensor& features, const at::Tensor& positions);
  std::optional<RotaryAngles> rotary_angles_of(const at::Tensor& positions, c10::ScalarType dtype) const;
  // The causal mask of a window whose rows all start a context, banded by the window.
  at::Tensor causal_window_mask(int64_t batch, int64_t steps, const at::TensorOptions& options) const;
  // Stores prefilled keys and values: the first T slots, or each row's last steps in a ring.
  void store_prefill(const WindowKeysValues& window, const at::Tensor& lengths, at::Tensor& layer_keys,
                     at::Tensor& layer_values) const;
  CausalTransformerKvCache& cache_of(KvCache* kv_cache, int64_t batch_size) const;
  // The cached step of the streams in `rows` (undefined: every stream, in order).
  BackboneOutput forward_cached_step(at::Tensor h, const at::Tensor& positions, int64_t max_position,
                                     CausalTransformerKvCache& cache, const at::Tensor& rows = {});

  CausalTransformerOptions options_;
  torch::nn::Linear in_proj_{nullptr};
  torch::nn::Embedding pos_emb_{nullptr};  // learned positions only
  torch::nn::ModuleList blocks_{nullptr};
  std::vector<TransformerBlock> block_list_;
  torch::nn::LayerNorm norm_{nullptr};
};

}  // namespace kvrl
