#include "common/comm/mpi_weight_broadcast.h"

#include <ATen/core/grad_mode.h>

#include <new>

#include "common/comm/mpi_check.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

class PendingIbcast : public PendingBroadcast {
 public:
  PendingIbcast(at::Tensor buffer, MPI_Comm members, bool root)
      : buffer_(std::move(buffer)), host_(buffer_.to(at::kCPU).contiguous()), root_(root) {
    KVRL_MPI_CHECK(MPI_Ibcast(host_.data_ptr<float>(), static_cast<int>(host_.numel()), MPI_FLOAT, 0, members,
                              &request_),
                   "starting a weight broadcast");
  }
  ~PendingIbcast() override {
    // The protocol only lets go of broadcasts that landed. One still running here means
    // the rank is failing (an exception unwinding towards MPI_Abort): waiting could hang
    // on a dead peer, and MPI can neither cancel nor free a collective's request, so the
    // buffer MPI may still write is deliberately leaked.
    // nothrow: a destructor must not throw; out of memory, the buffer is freed after all.
    if (request_ != MPI_REQUEST_NULL) static_cast<void>(new (std::nothrow) at::Tensor(std::move(host_)));
  }

  bool landed() override {
    if (request_ == MPI_REQUEST_NULL) return true;
    int done = 0;
    KVRL_MPI_CHECK(MPI_Test(&request_, &done, MPI_STATUS_IGNORE), "testing a weight broadcast");
    if (done && !root_ && !buffer_.is_same(host_)) {
      at::NoGradGuard no_grad;
      buffer_.copy_(host_);
    }
    return done != 0;
  }

  // The job is going down with an Error and MPI_Abort ends the collective; the
  // destructor keeps its buffer alive until then.
  void abandon() override {}

 private:
  at::Tensor buffer_;
  at::Tensor host_;  // the buffer itself when it is a contiguous host tensor
  bool root_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

}  // namespace

MpiWeightBroadcast::MpiWeightBroadcast(MPI_Comm members) : members_(members) {
  KVRL_MPI_CHECK(MPI_Comm_rank(members_, &rank_), "reading the weight broadcast rank");
}

std::unique_ptr<PendingBroadcast> MpiWeightBroadcast::join(at::Tensor buffer) {
  if (buffer.dim() != 1 || buffer.scalar_type() != at::kFloat) {
    throw InvalidArgumentError("MpiWeightBroadcast::join: expected a 1-d float buffer, got " +
                               c10::str(buffer.scalar_type(), buffer.sizes()));
  }
  return std::make_unique<PendingIbcast>(std::move(buffer), members_, rank_ == 0);
}

}  // namespace kvrl
