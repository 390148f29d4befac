#include "common/comm/mpi_communicator.h"

#include "common/comm/gradient_buckets.h"
#include "common/comm/mpi_check.h"
#include "common/comm/mpi_ring_reduction.h"

namespace kvrl {

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int64_t bucket_bytes)
    : comm_(comm), bucket_bytes_(bucket_bytes) {
  KVRL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "reading the learner rank");
  KVRL_MPI_CHECK(MPI_Comm_size(comm_, &size_), "reading the learner count");
}

void MpiCommunicator::all_reduce_mean(std::vector<at::Tensor>& tensors) {
  if (size_ == 1 || tensors.empty()) return;
  for (const TensorBucket& bucket : plan_buckets(tensors, bucket_bytes_)) {
    at::Tensor flat = flatten_bucket(bucket, tensors);
    start_all_reduce_mean(flat)->wait();
    unflatten_bucket(flat, bucket, tensors);
  }
}

void MpiCommunicator::broadcast(std::vector<at::Tensor>& tensors, int root) {
  if (size_ == 1 || tensors.empty()) return;
  for (const TensorBucket& bucket : plan_buckets(tensors, bucket_bytes_)) {
    at::Tensor buffer = flatten_bucket(bucket, tensors).to(at::kCPU, at::kFloat).contiguous();
    KVRL_MPI_CHECK(
        MPI_Bcast(buffer.data_ptr<float>(), static_cast<int>(buffer.numel()), MPI_FLOAT, root, comm_),
        "broadcasting parameters from learner " + std::to_string(root));
    unflatten_bucket(buffer, bucket, tensors);
  }
}

std::unique_ptr<PendingReduction> MpiCommunicator::start_all_reduce_mean(at::Tensor flat) {
  if (size_ == 1) return Communicator::start_all_reduce_mean(std::move(flat));
  // Reductions in flight at once each keep to a tag of their own, so that one's steps never
  // match another's; every learner starts them in the same order, so the tags agree.
  const int tag = static_cast<int>(reductions_started_++ % kRingTags);
  return start_ring_mean(std::move(flat), comm_, tag);
}

double MpiCommunicator::all_reduce_sum(double value) {
  if (size_ == 1) return value;
  double sum = 0;
  KVRL_MPI_CHECK(MPI_Reduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, comm_), "reducing a counter");
  KVRL_MPI_CHECK(MPI_Bcast(&sum, 1, MPI_DOUBLE, 0, comm_), "broadcasting a counter");
  return sum;
}

}  // namespace kvrl
