// The actor's cached step captured in a CUDA graph (built with kvrl's CUDA paths only).
// At batch sizes an actor uses (1 to a few hundred streams) a step of a small transformer
// is a few hundred tiny kernels, and launching them costs more than running them; a graph
// replays all of them with one launch. TransformerModule captures its static-shape step
// (Backbone::static_step) once per cache: shapes depend on the batch only and the step
// makes no host synchronisation, so one capture serves every step until the cache, the
// batch, the dtype or the weights' storage change.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>

namespace kvrl {

class CudaStepGraph {
 public:
  // One cached step: reads features [B, 1, F] and init [B] (bool), updates the cache and
  // `positions` in place, returns the step's output.
  using Step = std::function<at::Tensor(const at::Tensor& features, const at::Tensor& init)>;

  // Warms `step` up twice on a side stream (restoring `positions` afterwards, so the
  // warm-ups leave no trace the next step can see), then captures it reading the graph's
  // own input buffers, shaped like `features` and `init`. Throws (c10::Error or
  // kvrl::Error) when the step cannot be captured; the stream is then left out of capture.
  static std::unique_ptr<CudaStepGraph> capture(const Step& step, const at::Tensor& features,
                                                const at::Tensor& init, at::Tensor& positions);
  ~CudaStepGraph();
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  // Copies the inputs into the graph's buffers, replays it on the current stream and
  // returns a copy of its output (the graph's own is overwritten by the next replay).
  at::Tensor replay(const at::Tensor& features, const at::Tensor& init);

 private:
  struct Impl;
  explicit CudaStepGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrl
