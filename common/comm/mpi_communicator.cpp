#include "common/comm/mpi_communicator.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty_like.h>

#include <new>

#include "common/comm/gradient_buckets.h"
#include "common/comm/mpi_check.h"

namespace kvrl {

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int64_t bucket_bytes)
    : comm_(comm), bucket_bytes_(bucket_bytes) {
  KVRL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "reading the learner rank");
  KVRL_MPI_CHECK(MPI_Comm_size(comm_, &size_), "reading the learner count");
}

void MpiCommunicator::all_reduce_mean(std::vector<at::Tensor>& tensors) {
  if (size_ == 1 || tensors.empty()) return;
  for (const TensorBucket& bucket : plan_buckets(tensors, bucket_bytes_)) {
    // MPI reads host memory: a bucket of GPU tensors is staged through the CPU.
    at::Tensor buffer = flatten_bucket(bucket, tensors).to(at::kCPU, at::kFloat).contiguous();
    at::Tensor sum = at::empty_like(buffer);
    const int count = static_cast<int>(buffer.numel());
    KVRL_MPI_CHECK(
        MPI_Reduce(buffer.data_ptr<float>(), sum.data_ptr<float>(), count, MPI_FLOAT, MPI_SUM, 0, comm_),
        "reducing gradients to learner 0");
    KVRL_MPI_CHECK(MPI_Bcast(sum.data_ptr<float>(), count, MPI_FLOAT, 0, comm_),
                   "broadcasting summed gradients");
    sum.div_(static_cast<double>(size_));
    unflatten_bucket(sum, bucket, tensors);
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

namespace {

// The reduce half of a mean runs while the caller goes on (backward); the broadcast half
// runs in wait(). Both halves are rooted at learner 0, as in all_reduce_mean, so every
// learner gets learner 0's sum.
class PendingMpiReduction : public PendingReduction {
 public:
  PendingMpiReduction(at::Tensor flat, MPI_Comm comm, int size)
      : flat_(std::move(flat)),
        host_(flat_.to(at::kCPU, at::kFloat).contiguous()),
        sum_(at::empty_like(host_)),
        comm_(comm),
        size_(size) {
    KVRL_MPI_CHECK(MPI_Ireduce(host_.data_ptr<float>(), sum_.data_ptr<float>(), count(), MPI_FLOAT, MPI_SUM,
                               0, comm_, &request_),
                   "starting to reduce gradients to learner 0");
  }
  ~PendingMpiReduction() override {
    // An unfinished reduction here means the rank is unwinding from an error towards
    // MPI_Abort; MPI can neither cancel nor free a collective's request, so the buffers
    // MPI may still read and write are deliberately leaked.
    if (request_ != MPI_REQUEST_NULL) {
      // nothrow: a destructor must not throw; out of memory, the buffers are freed after all.
      static_cast<void>(new (std::nothrow) at::Tensor(host_));
      static_cast<void>(new (std::nothrow) at::Tensor(sum_));
    }
  }

  bool progress() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    KVRL_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "reducing gradients to learner 0");
    return done != 0;
  }

  void wait() override {
    KVRL_MPI_CHECK(MPI_Wait(&request_, MPI_STATUS_IGNORE), "reducing gradients to learner 0");
    KVRL_MPI_CHECK(MPI_Bcast(sum_.data_ptr<float>(), count(), MPI_FLOAT, 0, comm_),
                   "broadcasting summed gradients");
    sum_.div_(static_cast<double>(size_));
    at::NoGradGuard no_grad;
    flat_.copy_(sum_);
  }

 private:
  int count() const { return static_cast<int>(host_.numel()); }

  at::Tensor flat_, host_, sum_;
  MPI_Comm comm_;
  int size_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

std::unique_ptr<PendingReduction> MpiCommunicator::start_all_reduce_mean(at::Tensor flat) {
  if (size_ == 1) return Communicator::start_all_reduce_mean(std::move(flat));
  return std::make_unique<PendingMpiReduction>(std::move(flat), comm_, size_);
}

double MpiCommunicator::all_reduce_sum(double value) {
  if (size_ == 1) return value;
  double sum = 0;
  KVRL_MPI_CHECK(MPI_Reduce(&value, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, comm_), "reducing a counter");
  KVRL_MPI_CHECK(MPI_Bcast(&sum, 1, MPI_DOUBLE, 0, comm_), "broadcasting a counter");
  return sum;
}

}  // namespace kvrl
