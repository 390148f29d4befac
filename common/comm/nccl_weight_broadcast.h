// The staged weight broadcast over NCCL (built with kvrl's CUDA paths only).
#pragma once

#include <c10/core/Device.h>
#include <mpi.h>

#include <memory>
#include <string>

#include "common/comm/staged_weights.h"

namespace kvrl {

// The staged weight broadcast (common/comm/staged_weights.h) over NCCL, on a communicator of
// learner 0 (rank 0) and the actors, each on a GPU of its own (NCCL refuses two ranks on
// one GPU). Bootstrapped over `members` as NcclCommunicator is. A broadcast runs on a
// dedicated stream after the work that wrote its buffer; landed() polls its completion
// event and ncclCommGetAsyncError, and abandon() aborts the communicator.
class NcclWeightBroadcast : public WeightBroadcastTransport {
 public:
  NcclWeightBroadcast(MPI_Comm members, c10::Device device);
  ~NcclWeightBroadcast() override;
  NcclWeightBroadcast(const NcclWeightBroadcast&) = delete;
  NcclWeightBroadcast& operator=(const NcclWeightBroadcast&) = delete;

  std::unique_ptr<PendingBroadcast> join(at::Tensor buffer) override;
  std::string name() const override { return "NCCL"; }

  struct Impl;  // the communicator and stream, shared with the broadcasts in flight

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace kvrl
