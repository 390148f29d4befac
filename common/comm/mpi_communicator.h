// The learners' collectives (common/comm/communicator.h) over MPI.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "common/comm/communicator.h"

namespace kvrl {

// Learners' collectives over an MPI communicator of learners only, in buckets of
// `bucket_bytes` (common/comm/gradient_buckets.h); tensors on a GPU are staged through the
// CPU. Means are reduced to rank 0 and broadcast back, so every learner holds
// bit-identical results (an allreduce may round differently on different ranks).
class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, int64_t bucket_bytes = int64_t{25} << 20);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_mean(std::vector<at::Tensor>& tensors) override;
  void broadcast(std::vector<at::Tensor>& tensors, int root) override;
  double all_reduce_sum(double value) override;
  // MPI_Ireduce to learner 0 now; the broadcast of the sum back in wait().
  std::unique_ptr<PendingReduction> start_all_reduce_mean(at::Tensor flat) override;

 private:
  MPI_Comm comm_;
  int64_t bucket_bytes_;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace kvrl
