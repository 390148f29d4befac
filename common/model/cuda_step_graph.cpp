#include "common/model/cuda_step_graph.h"

#include <ATen/autocast_mode.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

namespace kvrl {

struct CudaStepGraph::Impl {
  at::cuda::CUDAGraph graph;
  at::Tensor features;  // the graph's input buffers, read by every replay
  at::Tensor init;
  at::Tensor out;  // written by every replay
};

namespace {

// Orders `later` after the work queued so far on `earlier`.
void order_after(const c10::cuda::CUDAStream& earlier, const c10::cuda::CUDAStream& later) {
  at::cuda::CUDAEvent event;
  event.record(earlier);
  event.block(later);
}

// Leaves stream capture after a failed capture, so the stream is usable again; the
// graph's own reset() then returns its private memory pool to the allocator.
void abandon_capture(const c10::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    cudaStreamEndCapture(stream.stream(), &partial);
    if (partial != nullptr) cudaGraphDestroy(partial);
  }
  cudaGetLastError();  // a failed capture leaves a non-sticky error behind
}

// Autocast's cast-weight cache must be off during capture: the casts it would cache live
// in the graph's pool and are freed when the autocast scope ends.
class AutocastCacheOff {
 public:
  AutocastCacheOff() : was_enabled_(at::autocast::is_autocast_cache_enabled()) {
    at::autocast::set_autocast_cache_enabled(false);
  }
  ~AutocastCacheOff() { at::autocast::set_autocast_cache_enabled(was_enabled_); }
  AutocastCacheOff(const AutocastCacheOff&) = delete;
  AutocastCacheOff& operator=(const AutocastCacheOff&) = delete;

 private:
  bool was_enabled_;
};

}  // namespace

CudaStepGraph::CudaStepGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaStepGraph::~CudaStepGraph() = default;

std::unique_ptr<CudaStepGraph> CudaStepGraph::capture(const Step& step, const at::Tensor& features,
                                                      const at::Tensor& init, at::Tensor& positions) {
  const c10::cuda::CUDAGuard device_guard(features.device());
  auto impl = std::make_unique<Impl>();
  impl->features = features.clone();
  impl->init = init.clone();
  const at::Tensor saved_positions = positions.clone();
  const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  order_after(current, side);
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    // Warm-ups let lazy initialisation (cuBLAS handles, workspaces) happen outside capture.
    // They write cache slots the next step overwrites before it reads them, or that stay
    // masked until then; only the positions need restoring.
    for (int i = 0; i < 2; ++i) step(impl->features, impl->init);
    positions.copy_(saved_positions);
    const AutocastCacheOff autocast_cache_off;
    try {
      // Thread-local: other threads of the process may keep using CUDA meanwhile.
      impl->graph.capture_begin(/*pool=*/{0, 0}, cudaStreamCaptureModeThreadLocal);
      impl->out = step(impl->features, impl->init);
      impl->graph.capture_end();
    } catch (...) {
      abandon_capture(side);
      throw;
    }
  }
  order_after(side, current);
  return std::unique_ptr<CudaStepGraph>(new CudaStepGraph(std::move(impl)));
}

at::Tensor CudaStepGraph::replay(const at::Tensor& features, const at::Tensor& init) {
  impl_->features.copy_(features);
  impl_->init.copy_(init);
  impl_->graph.replay();
  return impl_->out.clone();
}

}  // namespace kvrl
