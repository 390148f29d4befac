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
// CPU. Means go around a ring (common/comm/mpi_ring_reduction.h): each slice is summed on
// one learner only, so every learner holds bit-identical results (MPI_Allreduce does not
// promise that).
class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, int64_t bucket_bytes = int64_t{25} << 20);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_mean(std::vector<at::Tensor>& tensors) override;
  void broadcast(std::vector<at::Tensor>& tensors, int root) override;
  double all_reduce_sum(double value) override;
  // The ring's first step now; the rest in progress() and wait().
  std::unique_ptr<PendingReduction> start_all_reduce_mean(at::Tensor flat) override;

 private:
  MPI_Comm comm_;
  int64_t bucket_bytes_;
  int rank_ = 0;
  int size_ = 1;
  static constexpr int64_t kRingTags = 16384;  // within MPI's smallest allowed tag range (32767)
  int64_t reductions_started_ = 0;
};

}  // namespace kvrl
