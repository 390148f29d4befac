// Learners' collectives over NCCL, for learners whose model is on a GPU (built only with
// kvrl's CUDA/NCCL paths, KVRL_HAVE_NCCL). The NCCL communicator is bootstrapped over
// MPI: learner 0 creates the unique id and broadcasts it on the learners' MPI
// communicator. Gradients are averaged in flat buckets (common/comm/gradient_buckets.h) with
// ncclAvg on a dedicated stream, ordered after the work that produced them; NCCL hands
// every rank the same reduced bytes, so learners stay bit-identical. Scalars
// (all_reduce_sum) go over MPI: they are host values and need no device round trip.
//
// Faults: after enqueueing, the caller waits by polling the collective's completion
// event and ncclCommGetAsyncError; an asynchronous error, or a collective still running
// after `timeout_s`, aborts the communicator (so no rank stays blocked in it) and throws
// an Error naming the operation, the rank and the reason, which takes the job down.
#pragma once

#include <c10/core/Device.h>
#include <mpi.h>

#include <memory>

#include "common/comm/communicator.h"

namespace kvrl {

struct NcclOptions {
  int64_t bucket_bytes = int64_t{25} << 20;
  double timeout_s = 300;
};

class NcclCommunicator : public Communicator {
 public:
  // Collective over `learners` (an MPI communicator); `device` is this rank's GPU.
  // Throws Error naming the NCCL or CUDA call that failed.
  NcclCommunicator(MPI_Comm learners, c10::Device device, NcclOptions options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  void all_reduce_mean(std::vector<at::Tensor>& tensors) override;
  void broadcast(std::vector<at::Tensor>& tensors, int root) override;
  double all_reduce_sum(double value) override;
  // Enqueued on the collective stream after the calling thread's current stream, so a
  // backward thread may start a bucket as soon as its gradients are queued.
  std::unique_ptr<PendingReduction> start_all_reduce_mean(at::Tensor flat) override;
  bool starts_on_any_thread() const override { return true; }

  struct Impl;  // public so that its pending reductions can name it

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrl
