#include "common/comm/mpi_ring_reduction.h"

#include <ATen/core/grad_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <array>
#include <new>

#include "common/comm/mpi_check.h"

namespace kvrl {
namespace {

// Rank r, at step s of p - 1: the reduce-scatter sends its partial sum of slice (r - s) to
// rank r + 1 and adds what rank r - 1 sends of slice (r - s - 1); after it, rank r holds
// the whole sum of slice (r + 1). The all-gather then passes finished slices along the
// ring: at step s, slice (r + 1 - s) goes out and slice (r - s) comes in.
class RingMean : public PendingReduction {
 public:
  RingMean(at::Tensor flat, MPI_Comm comm, int tag) : flat_(std::move(flat)), comm_(comm), tag_(tag) {
    KVRL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_), "reading the learner rank");
    KVRL_MPI_CHECK(MPI_Comm_size(comm_, &size_), "reading the learner count");
    slice_ = (flat_.numel() + size_ - 1) / size_;
    // Padded to whole slices; the padding sums zeros.
    host_ = at::zeros({slice_ * size_}, at::TensorOptions().dtype(at::kFloat));
    host_.narrow(0, 0, flat_.numel()).copy_(flat_.reshape({-1}));
    incoming_ = at::empty({slice_}, host_.options());
    post_step();
  }

  ~RingMean() override {
    // Unfinished here means the rank is unwinding from an error towards MPI_Abort: MPI may
    // still write into the buffers, so they are deliberately leaked.
    if (requests_[0] != MPI_REQUEST_NULL || requests_[1] != MPI_REQUEST_NULL) {
      static_cast<void>(new (std::nothrow) at::Tensor(host_));
      static_cast<void>(new (std::nothrow) at::Tensor(incoming_));
    }
  }

  bool progress() override {
    while (!finished()) {
      int done = 0;
      KVRL_MPI_CHECK(MPI_Testall(2, requests_.data(), &done, MPI_STATUSES_IGNORE),
                     "averaging gradients around the learners' ring");
      if (!done) return false;
      complete_step();
    }
    return true;
  }

  void wait() override {
    while (!finished()) {
      KVRL_MPI_CHECK(MPI_Waitall(2, requests_.data(), MPI_STATUSES_IGNORE),
                     "averaging gradients around the learners' ring");
      complete_step();
    }
    host_.div_(static_cast<double>(size_));
    at::NoGradGuard no_grad;
    flat_.copy_(host_.narrow(0, 0, flat_.numel()).view_as(flat_));
  }

 private:
  int steps_per_phase() const { return size_ - 1; }
  bool finished() const { return step_ == 2 * steps_per_phase(); }
  bool gathering() const { return step_ >= steps_per_phase(); }
  int wrap(int slice) const { return ((slice % size_) + size_) % size_; }
  at::Tensor slice(int index) { return host_.narrow(0, int64_t{index} * slice_, slice_); }

  // Slices this step sends and receives.
  int outgoing_slice() const {
    const int s = step_ % steps_per_phase();
    return gathering() ? wrap(rank_ + 1 - s) : wrap(rank_ - s);
  }
  int incoming_slice() const {
    const int s = step_ % steps_per_phase();
    return gathering() ? wrap(rank_ - s) : wrap(rank_ - s - 1);
  }

  void post_step() {
    if (finished()) return;
    const int count = static_cast<int>(slice_);
    // A gathered slice lands in place; a partial sum lands aside, to be added.
    float* into = gathering() ? slice(incoming_slice()).data_ptr<float>() : incoming_.data_ptr<float>();
    KVRL_MPI_CHECK(MPI_Irecv(into, count, MPI_FLOAT, wrap(rank_ - 1), tag_, comm_, &requests_[0]),
                   "receiving gradients from the previous learner");
    KVRL_MPI_CHECK(MPI_Isend(slice(outgoing_slice()).data_ptr<float>(), count, MPI_FLOAT, wrap(rank_ + 1),
                             tag_, comm_, &requests_[1]),
                   "sending gradients to the next learner");
  }

  void complete_step() {
    if (!gathering()) slice(incoming_slice()).add_(incoming_);
    ++step_;
    post_step();
  }

  at::Tensor flat_, host_, incoming_;
  MPI_Comm comm_;
  int tag_;
  int rank_ = 0, size_ = 1;
  int64_t slice_ = 0;
  int step_ = 0;
  std::array<MPI_Request, 2> requests_{MPI_REQUEST_NULL, MPI_REQUEST_NULL};
};

}  // namespace

std::unique_ptr<PendingReduction> start_ring_mean(at::Tensor flat, MPI_Comm comm, int tag) {
  return std::make_unique<RingMean>(std::move(flat), comm, tag);
}

}  // namespace kvrl
