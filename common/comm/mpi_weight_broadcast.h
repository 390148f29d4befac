// The staged weight broadcast (common/comm/staged_weights.h) over MPI_Ibcast, on a
// communicator of learner 0 (its rank 0) and the actors. Buffers on a GPU go through the
// host, since MPI is not assumed to read device memory.
#pragma once

#include <mpi.h>

#include "common/comm/staged_weights.h"

namespace kvrl {

class MpiWeightBroadcast : public WeightBroadcastTransport {
 public:
  // `members`: learner 0 and the actors, learner 0 first. Not owned.
  explicit MpiWeightBroadcast(MPI_Comm members);
  std::unique_ptr<PendingBroadcast> join(at::Tensor buffer) override;
  std::string name() const override { return "MPI_Ibcast"; }

 private:
  MPI_Comm members_;
  int rank_ = 0;
};

}  // namespace kvrl
