#include "common/comm/nccl_communicator.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <nccl.h>

#include <chrono>
#include <string>
#include <thread>

#include "common/comm/gradient_buckets.h"
#include "common/comm/mpi_check.h"
#include "common/comm/mpi_communicator.h"
#include "common/comm/nccl_support.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

ncclDataType_t nccl_type(c10::ScalarType type) {
  switch (type) {
    case c10::kFloat:
      return ncclFloat32;
    case c10::kDouble:
      return ncclFloat64;
    case c10::kHalf:
      return ncclFloat16;
    case c10::kBFloat16:
      return ncclBfloat16;
    default:
      throw InvalidArgumentError(std::string("NCCL collectives take floating tensors, not ") +
                                 c10::toString(type));
  }
}

}  // namespace

struct NcclCommunicator::Impl {
  std::unique_ptr<MpiCommunicator> scalars;  // host values go over MPI
  c10::Device device = c10::Device(c10::kCUDA, 0);
  NcclOptions options;
  ncclComm_t comm = nullptr;
  int rank = 0;
  int size = 1;
  c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true);

  // Enqueues `enqueue` on the collective stream after the work already queued on the
  // calling thread's current stream, in one NCCL group; returns the event of its completion.
  template <typename Enqueue>
  at::cuda::CUDAEvent enqueue_after_current(const std::string& operation, std::vector<at::Tensor>& buffers,
                                            Enqueue enqueue) {
    const c10::cuda::CUDAGuard guard(device);
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream(device.index()));
    produced.block(stream);
    for (auto& buffer : buffers) buffer.record_stream(stream);  // the allocator must not reuse them early
    KVRL_NCCL_CHECK(ncclGroupStart(), operation + " (group start)");
    for (auto& buffer : buffers) enqueue(buffer);
    KVRL_NCCL_CHECK(ncclGroupEnd(), operation + " (group end)");
    at::cuda::CUDAEvent done;
    done.record(stream);
    return done;
  }

  // Waits for `done` while watching for NCCL errors and the timeout, then orders the
  // calling thread's current stream after it.
  void await(const std::string& operation, at::cuda::CUDAEvent& done) {
    const c10::cuda::CUDAGuard guard(device);
    const auto start = std::chrono::steady_clock::now();
    while (!done.query()) {
      std::string problem = comm == nullptr ? "the communicator was aborted" : nccl_async_error(comm);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (problem.empty() && waited > options.timeout_s) {
        problem = "still running after " + std::to_string(options.timeout_s) + " s (learner.nccl_timeout_s)";
      }
      if (!problem.empty()) {
        if (comm != nullptr)
          ncclCommAbort(comm);  // unblocks this rank's kernels; the job goes down with the Error
        comm = nullptr;
        throw Error("NCCL " + operation + " on learner rank " + std::to_string(rank) + " (" + device.str() +
                    ") failed: " + problem);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    done.block(c10::cuda::getCurrentCUDAStream(device.index()));
  }

  template <typename Enqueue>
  void run(const std::string& operation, std::vector<at::Tensor>& buffers, Enqueue enqueue) {
    at::cuda::CUDAEvent done = enqueue_after_current(operation, buffers, enqueue);
    await(operation, done);
  }

  void all_reduce_in_place(at::Tensor& buffer) {
    KVRL_NCCL_CHECK(ncclAllReduce(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                  nccl_type(buffer.scalar_type()), ncclAvg, comm, stream.stream()),
                    "all-reduce");
  }
};

namespace {

// One bucket's all-reduce, enqueued on the collective stream when backward produced it.
class PendingNcclReduction : public PendingReduction {
 public:
  PendingNcclReduction(NcclCommunicator::Impl& impl, std::string operation, at::cuda::CUDAEvent done)
      : impl_(impl), operation_(std::move(operation)), done_(std::move(done)) {}
  bool progress() override { return done_.query(); }
  void wait() override { impl_.await(operation_, done_); }

 private:
  NcclCommunicator::Impl& impl_;
  std::string operation_;
  at::cuda::CUDAEvent done_;
};

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm learners, c10::Device device, NcclOptions options)
    : impl_(std::make_unique<Impl>()) {
  if (!device.is_cuda())
    throw InvalidArgumentError("NcclCommunicator needs a CUDA device, got " + device.str());
  impl_->scalars = std::make_unique<MpiCommunicator>(learners);
  impl_->device = device;
  impl_->options = options;
  KVRL_MPI_CHECK(MPI_Comm_rank(learners, &impl_->rank), "reading the learner rank");
  KVRL_MPI_CHECK(MPI_Comm_size(learners, &impl_->size), "reading the learner count");
  const c10::cuda::CUDAGuard guard(device);
  impl_->stream = c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index());
  impl_->comm = nccl_comm_over_mpi(learners, impl_->rank, impl_->size, "learners'");
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_->comm) ncclCommDestroy(impl_->comm);
}

int NcclCommunicator::rank() const { return impl_->rank; }
int NcclCommunicator::size() const { return impl_->size; }

void NcclCommunicator::all_reduce_mean(std::vector<at::Tensor>& tensors) {
  if (tensors.empty()) return;
  const std::vector<TensorBucket> buckets = plan_buckets(tensors, impl_->options.bucket_bytes);
  std::vector<at::Tensor> flat;
  flat.reserve(buckets.size());
  for (const TensorBucket& bucket : buckets) flat.push_back(flatten_bucket(bucket, tensors));
  impl_->run("all-reduce of " + std::to_string(buckets.size()) + " gradient bucket(s)", flat,
             [&](at::Tensor& buffer) { impl_->all_reduce_in_place(buffer); });
  for (size_t i = 0; i < buckets.size(); ++i) unflatten_bucket(flat[i], buckets[i], tensors);
}

void NcclCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (tensors.empty()) return;
  const std::vector<TensorBucket> buckets = plan_buckets(tensors, impl_->options.bucket_bytes);
  std::vector<at::Tensor> flat;
  flat.reserve(buckets.size());
  for (const TensorBucket& bucket : buckets) flat.push_back(flatten_bucket(bucket, tensors));
  impl_->run("broadcast from learner " + std::to_string(root), flat, [&](at::Tensor& buffer) {
    KVRL_NCCL_CHECK(ncclBroadcast(buffer.data_ptr(), buffer.data_ptr(), buffer.numel(),
                                  nccl_type(buffer.scalar_type()), root, impl_->comm, impl_->stream.stream()),
                    "broadcast");
  });
  for (size_t i = 0; i < buckets.size(); ++i) unflatten_bucket(flat[i], buckets[i], tensors);
}

double NcclCommunicator::all_reduce_sum(double value) { return impl_->scalars->all_reduce_sum(value); }

std::unique_ptr<PendingReduction> NcclCommunicator::start_all_reduce_mean(at::Tensor flat) {
  std::vector<at::Tensor> buffers{std::move(flat)};
  const std::string operation =
      "all-reduce of a " + std::to_string(buffers[0].numel()) + "-element gradient bucket";
  at::cuda::CUDAEvent done = impl_->enqueue_after_current(
      operation, buffers, [&](at::Tensor& buffer) { impl_->all_reduce_in_place(buffer); });
  return std::make_unique<PendingNcclReduction>(*impl_, operation, std::move(done));
}

}  // namespace kvrl
