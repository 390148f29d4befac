// The backbone contract consumed by TransformerModule, as in the reference's
// CausalTransformer docstring: a forward over a window or one cached step, a cache
// factory and a masked reset, plus the four shape attributes. The cache is opaque to
// the module: a backbone decides its layout, dtype and device, so one whose cache lives
// in an inference engine plugs in as well as CausalTransformer does.
#pragma once

#include <torch/nn/module.h>

#include <memory>
#include <optional>

namespace kvrl {

// How a step's position enters a backbone: a learned table of max_seq_len rows added to
// the input (the reference), or rotary embeddings of queries and keys, which see only
// distances and so can slide.
enum class PositionEncoding { kLearned, kRotary };

// Inference state of a backbone's cached-step path. Only the backbone that made it
// knows what is inside; the module only holds and passes it back.
class KvCache {
 public:
  virtual ~KvCache() = default;
};

struct BackboneOutput {
  at::Tensor out;                     // [B, T, hidden_size]
  std::shared_ptr<KvCache> kv_cache;  // the updated cache on the cached-step path, else null
};

class Backbone : public torch::nn::Module {
 public:
  // features [B, T, input_size], positions [B, T] (kLong). Without a cache: the window
  // path, under `mask` [B, T, T] (true = attend; default plain causal). With a cache:
  // the cached-step path, T must be 1, the mask is ignored and the cache is updated in
  // place at `positions`. Throws InvalidArgumentError / SequenceTooLongError on bad input.
  virtual BackboneOutput forward(const at::Tensor& features, const at::Tensor& positions,
                                 const std::optional<at::Tensor>& mask,
                                 std::shared_ptr<KvCache> kv_cache) = 0;

  // The window path over rows packed with contexts that start where is_init [B, T] (bool)
  // is true, and at column 0: forward() under segment_causal_mask_from_is_init(is_init,
  // attention_window()), which the default builds; a backbone may attend without the mask.
  virtual BackboneOutput forward_packed(const at::Tensor& features, const at::Tensor& positions,
                                        const at::Tensor& is_init);

  // An empty cache for `batch_size` streams. device defaults to the parameters' device;
  // dtype is the autocast dtype (or nullopt for the weights' dtype) and may be ignored.
  virtual std::shared_ptr<KvCache> new_kv_cache(int64_t batch_size, std::optional<c10::Device> device,
                                                std::optional<c10::ScalarType> dtype) = 0;

  // Clears, in place, the streams selected by `mask` (bool [batch_size]) and returns the cache.
  virtual std::shared_ptr<KvCache> reset_kv_cache(std::shared_ptr<KvCache> kv_cache,
                                                  const at::Tensor& mask) = 0;

  // Rebuilds, in place, every stream's cache from the last steps of its current context:
  // stream b's lengths[b] steps are features[b, :lengths[b]] (padded past its length), and
  // the cache continues as if it had stepped them from a context start. Used after new
  // weights so streams keep their context instead of restarting. lengths [B] kLong. The
  // default replays the steps through the cached-step path, writing padded steps too:
  // right for a cache whose slots past a stream's length are never read before the next
  // step overwrites them, so a backbone whose cache is a ring (attention_window() > 0)
  // must override it.
  virtual void prefill_kv_cache(const at::Tensor& features, const at::Tensor& lengths, KvCache& kv_cache);

  // The cached step with shapes fixed by the batch size and no host synchronisation, so
  // that TransformerModule can capture it in a CUDA graph: it attends over every cache
  // slot under the mask slot <= position and checks no positions, so the caller must keep
  // them below max_seq_len. features [B, 1, input_size], positions [B] (kLong). Updates the
  // cache in place and returns [B, 1, hidden_size]. Only where has_static_step(); the
  // default throws.
  virtual bool has_static_step() const { return false; }
  virtual at::Tensor static_step(const at::Tensor& features, const at::Tensor& positions, KvCache& kv_cache);

  // Partial-batch stepping (TransformerModule::step_streams), where has_stream_steps():
  // the cached step of S of the cache's streams, chosen by rows [S] (kLong, distinct, each
  // below the cache's stream count), at positions [S] (kLong); features [S, 1, input_size].
  // The other streams' cache rows are left as they are. Returns [S, 1, hidden_size].
  virtual bool has_stream_steps() const { return false; }
  virtual at::Tensor stream_step(const at::Tensor& features, const at::Tensor& positions,
                                 const at::Tensor& rows, KvCache& kv_cache);
  // A cache for batch_size streams whose first rows hold `kv_cache`'s streams, so that a
  // stream-keyed cache can grow when a new stream appears. Where has_stream_steps().
  virtual std::shared_ptr<KvCache> resize_kv_cache(const KvCache& kv_cache, int64_t batch_size);

  virtual int64_t num_layers() const = 0;
  virtual int64_t num_heads() const = 0;
  virtual int64_t head_dim() const = 0;
  virtual int64_t max_seq_len() const = 0;
  // 0: a step attends to its whole context, which may not reach max_seq_len steps. W > 0:
  // a step attends to the last W steps of its context (itself included), positions are
  // unbounded and the cache holds W steps per stream (a sliding window).
  virtual int64_t attention_window() const { return 0; }
};

}  // namespace kvrl
