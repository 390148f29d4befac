#include "common/comm/nccl_weight_broadcast.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include "common/comm/mpi_check.h"
#include "common/comm/nccl_support.h"
#include "common/support/errors.h"

namespace kvrl {

struct NcclWeightBroadcast::Impl {
  c10::Device device = c10::Device(c10::kCUDA, 0);
  ncclComm_t comm = nullptr;
  int rank = 0;
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false);

  // Throws Error naming the rank when the communicator has failed; aborts it so that no
  // kernel of this rank stays blocked.
  void check_async(const std::string& operation) {
    if (comm == nullptr)
      throw Error("NCCL " + operation + " on weight-broadcast rank " + std::to_string(rank) +
                  ": the communicator was aborted");
    const std::string problem = nccl_async_error(comm);
    if (!problem.empty()) {
      abort();
      throw Error("NCCL " + operation + " on weight-broadcast rank " + std::to_string(rank) + " (" +
                  device.str() + ") failed: " + problem);
    }
  }
  void abort() {
    if (comm != nullptr) ncclCommAbort(comm);
    comm = nullptr;
  }
};

namespace {

class PendingNcclBroadcast : public PendingBroadcast {
 public:
  PendingNcclBroadcast(std::shared_ptr<NcclWeightBroadcast::Impl> impl, at::Tensor buffer)
      : impl_(std::move(impl)), buffer_(std::move(buffer)) {}
  void enqueue() {
    const c10::cuda::CUDAGuard guard(impl_->device);
    const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(impl_->device.index());
    at::cuda::CUDAEvent written;  // the buffer's producer (or last reader) comes first
    written.record(current);
    written.block(impl_->stream);
    buffer_.record_stream(impl_->stream);
    impl_->check_async("weight broadcast");
    KVRL_NCCL_CHECK(ncclBroadcast(buffer_.data_ptr(), buffer_.data_ptr(), buffer_.numel(), ncclFloat32,
                                  /*root=*/0, impl_->comm, impl_->stream.stream()),
                    "weight broadcast");
    done_.record(impl_->stream);
  }
  bool landed() override {
    impl_->check_async("weight broadcast");
    return done_.query();
  }
  void abandon() override { impl_->abort(); }

 private:
  std::shared_ptr<NcclWeightBroadcast::Impl> impl_;
  at::Tensor buffer_;
  at::cuda::CUDAEvent done_;
};

}  // namespace

NcclWeightBroadcast::NcclWeightBroadcast(MPI_Comm members, c10::Device device)
    : impl_(std::make_shared<Impl>()) {
  if (!device.is_cuda())
    throw InvalidArgumentError("NcclWeightBroadcast needs a CUDA device, got " + device.str());
  int size = 1;
  KVRL_MPI_CHECK(MPI_Comm_rank(members, &impl_->rank), "reading the weight-broadcast rank");
  KVRL_MPI_CHECK(MPI_Comm_size(members, &size), "reading the weight-broadcast size");
  impl_->device = device;
  const c10::cuda::CUDAGuard guard(device);
  impl_->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device.index());
  impl_->comm = nccl_comm_over_mpi(members, impl_->rank, size, "weight-broadcast");
}

NcclWeightBroadcast::~NcclWeightBroadcast() {
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  impl_->comm = nullptr;
}

std::unique_ptr<PendingBroadcast> NcclWeightBroadcast::join(at::Tensor buffer) {
  if (buffer.dim() != 1 || buffer.scalar_type() != at::kFloat || buffer.device() != impl_->device) {
    throw InvalidArgumentError("NcclWeightBroadcast::join: expected a 1-d float buffer on " +
                               impl_->device.str() + ", got " +
                               c10::str(buffer.scalar_type(), buffer.sizes(), " on ", buffer.device()));
  }
  auto pending = std::make_unique<PendingNcclBroadcast>(impl_, std::move(buffer));
  pending->enqueue();
  return pending;
}

}  // namespace kvrl
