// TransformerModule: turns a causal transformer backbone into a temporal policy module,
// the C++ port of the reference's TensorDict module. Actors call step() once per env
// step; the module owns the key/value cache, keyed by batch position (one stream per
// environment), clears rows where is_init is set, and starts afresh when the batch,
// device, autocast dtype or parameters change. Learners call window() on [B, T] windows
// that start at episode starts, under a block-diagonal causal mask built from is_init.
//
// Not thread-safe: one module instance per actor thread, as in the reference.
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/model/backbone.h"

namespace kvrl {

class CudaStepGraph;

struct TransformerModuleOptions {
  // Size arguments build a CausalTransformer; leave them unset when passing a backbone.
  std::optional<int64_t> input_size;                        // number of input features
  std::optional<int64_t> hidden_size;                       // residual stream width
  int64_t num_layers = 1;                                   // number of transformer blocks
  std::optional<int64_t> num_heads;                         // attention heads; required without a backbone
  std::optional<int64_t> max_seq_len;                       // longest episode; required without a backbone
  std::optional<int64_t> dim_feedforward;                   // per-block MLP width; default 4 * hidden_size
  double dropout = 0.0;                                     // dropout probability in the block MLPs
  PositionEncoding positions = PositionEncoding::kLearned;  // learned table or rotary
  int64_t attention_window = 0;         // 0: whole context; W: the last W steps (rotary only)
  bool tiled_attention = true;          // CausalTransformerOptions::tiled_attention
  bool default_recurrent_mode = false;  // path of forward() outside a RecurrentModeGuard
  bool validate_windows = true;         // window() checks every row starts with is_init
  // On a CUDA device, step() replays its static-shape step from a CUDA graph captured once
  // per cache (common/model/cuda_step_graph.h); a failed capture is reported through `warn` and
  // the module steps eagerly from then on. No effect elsewhere or without CUDA support.
  bool cuda_graphs = true;
  // Runs the static-shape step (Backbone::static_step) eagerly on any device: what a CUDA
  // graph replays, so that it can be checked on a CPU.
  bool static_shape_steps = false;
  // Told, once, why a faster path was not taken; may be empty.
  std::function<void(const std::string&)> warn;
};

// Selects the path of TransformerModule::forward() on this thread for its lifetime,
// like the reference's set_recurrent_mode context manager: true = window, false = step.
// Guards nest; the previous mode is restored on destruction.
class RecurrentModeGuard {
 public:
  explicit RecurrentModeGuard(bool recurrent_mode);
  ~RecurrentModeGuard();
  RecurrentModeGuard(const RecurrentModeGuard&) = delete;
  RecurrentModeGuard& operator=(const RecurrentModeGuard&) = delete;

  // The innermost guard's mode on this thread, or nullopt outside any guard.
  static std::optional<bool> current();

 private:
  std::optional<bool> previous_;
};

class TransformerModule : public torch::nn::Module {
 public:
  // Builds a CausalTransformer from the size options, on `device` when given.
  // Throws InvalidArgumentError when a size is missing or invalid.
  explicit TransformerModule(const TransformerModuleOptions& options,
                             std::optional<c10::Device> device = std::nullopt);
  // Wraps a pre-built backbone. Throws InvalidArgumentError when size options are also
  // set, the backbone is null, or its shape attributes are not positive.
  TransformerModule(std::shared_ptr<Backbone> backbone, const TransformerModuleOptions& options);
  // A copy would share the backbone and the cache; clone() is the copy, with an empty cache.
  TransformerModule(const TransformerModule&) = delete;
  TransformerModule& operator=(const TransformerModule&) = delete;

  // Dispatches to window() or step() by the current recurrent mode.
  at::Tensor forward(const at::Tensor& value, const at::Tensor& is_init);

  // Cached-step path, without gradients. value [*batch, F], is_init [*batch] or
  // [*batch, 1] (bool); the batch is flattened to streams. Returns [*batch, hidden].
  // Throws InvalidArgumentError on bad shapes, SequenceTooLongError past max_seq_len.
  at::Tensor step(const at::Tensor& value, const at::Tensor& is_init);

  // Partial-batch stepping: the cached step of only the streams named by stream_ids [S]
  // (kLong, distinct, non-negative), with value [S, F] and is_init [S] or [S, 1]. A stream
  // id is a cache row, so ids should be dense (0..N-1): the cache grows to the largest id
  // seen, keeping the other streams' context. Each stream keeps its own position and cache
  // row, so stepping streams in any grouping equals stepping the whole batch, and step()
  // on N streams continues streams 0..N-1. Runs eagerly (no CUDA graph: S varies).
  // Returns [S, hidden]. Throws InvalidArgumentError on bad shapes or ids, or when the
  // backbone has no stream steps; SequenceTooLongError past max_seq_len.
  at::Tensor step_streams(const at::Tensor& value, const at::Tensor& is_init, const at::Tensor& stream_ids);

  // Window path, with gradients. value [*batch, T, F] with at least the T dim,
  // is_init [*batch, T] or [*batch, T, 1]. Returns [*batch, T, hidden]. Throws
  // InvalidArgumentError when validate_windows is set and a row does not start an episode.
  at::Tensor window(const at::Tensor& value, const at::Tensor& is_init);

  // Rebuilds the cache so that stream b continues its context at position lengths[b],
  // attending to its steps value[b, :lengths[b]] computed with the current weights as if
  // its context had started at the first of them (rows are padded past their length). Call it after
  // mark_weight_update() to keep every stream's context instead of restarting it, so the acting policy is the
  // one a learner evaluates on the whole episode. value [B, T, F], lengths [B] (kLong, each in [0, T]).
  // Throws InvalidArgumentError on bad shapes, SequenceTooLongError past max_seq_len.
  void prefill(const at::Tensor& value, const at::Tensor& lengths);

  // Releases the cache and the per-stream positions; the next step starts afresh.
  void reset_cache();
  // Discards the cache after new weights were applied, so no stream attends to keys and
  // values computed with the previous weights.
  void mark_weight_update();
  // After new weights were applied in place: keeps the cache as it is, so streams go on
  // attending to keys and values the previous weights computed (in-flight weight updates,
  // as PipelineRL does). Without it the next step would see changed parameters and start
  // a fresh cache.
  void keep_cache_across_weight_update();

  bool recurrent_mode() const;
  bool has_cache() const { return kv_cache_ != nullptr; }
  // Whether the last step() replayed a CUDA graph.
  bool stepped_from_graph() const { return stepped_from_graph_; }
  // Per-stream position of the next step, or an undefined tensor without a cache.
  const at::Tensor& stream_positions() const { return positions_; }
  Backbone& transformer() { return *backbone_; }
  const Backbone& transformer() const { return *backbone_; }
  const TransformerModuleOptions& options() const { return options_; }

  // A deep copy with the same parameters and an empty cache.
  std::shared_ptr<torch::nn::Module> clone(
      const std::optional<torch::Device>& device = std::nullopt) const override;

 private:
  using WeightsVersion = std::vector<std::pair<const void*, int64_t>>;
  WeightsVersion current_weights_version() const;
  // Whether the cache must start afresh on `device`: none yet, or another device, autocast
  // dtype or parameters.
  bool cache_is_stale(const c10::Device& device) const;
  void allocate_state(const c10::Device& device, int64_t streams);
  // Allocates a fresh cache when none fits this batch; returns whether it did.
  bool ensure_fresh_state(const at::Tensor& value);
  // The stream-keyed version: a fresh cache of at least `streams` rows when the device,
  // dtype or weights changed, else the cache grown to `streams` rows keeping its streams.
  void ensure_stream_rows(const c10::Device& device, int64_t streams);
  // Host-side checks of step_streams' arguments; returns the largest stream id.
  int64_t check_stream_ids(const at::Tensor& value, const at::Tensor& stream_ids) const;
  bool uses_static_step(const c10::Device& device) const;
  at::Tensor eager_step(const at::Tensor& features, const at::Tensor& init);
  // The static-shape step, from a CUDA graph where one applies.
  at::Tensor static_shape_step(const at::Tensor& features, const at::Tensor& init, bool fresh);
  at::Tensor run_static_step(const at::Tensor& features, const at::Tensor& init);
  // Keeps next_position_bound_ an upper bound of this step's positions without reading
  // them from the device, and reads them only when the bound reaches max_seq_len.
  // Throws SequenceTooLongError when a position really does.
  void bound_next_position(const at::Tensor& init, bool fresh);
  void capture_step_graph(const at::Tensor& features, const at::Tensor& init);

  TransformerModuleOptions options_;
  std::shared_ptr<Backbone> backbone_;
  std::shared_ptr<KvCache> kv_cache_;
  at::Tensor positions_;
  std::optional<c10::ScalarType> cache_dtype_;
  WeightsVersion weights_version_;
  // Static-shape step only: an upper bound on the largest position of the current step.
  int64_t next_position_bound_ = 0;
  std::shared_ptr<CudaStepGraph> step_graph_;  // for the current cache; null until captured
  bool graph_capture_failed_ = false;          // then every later step runs eagerly
  bool stepped_from_graph_ = false;
};

}  // namespace kvrl
