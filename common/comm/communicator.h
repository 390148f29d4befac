// The collective seam between learners: gradient averaging and parameter broadcast.
// Implementations: LocalCommunicator (one learner, common/comm/local_communicator.h),
// MpiCommunicator (learners over MPI) and NcclCommunicator (learners on GPUs). Every method is a
// collective: all members call it in the same order, and it blocks until done.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

namespace kvrl {

// A mean over the learners that start_all_reduce_mean() has started and wait() completes.
class PendingReduction {
 public:
  virtual ~PendingReduction() = default;
  // Lets the transport move the reduction along without blocking (MPI advances a
  // non-blocking collective only inside MPI calls); returns whether it has finished.
  virtual bool progress() { return true; }
  // Blocks until the buffer holds the mean over members. Throws as the blocking
  // collective does.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Replaces each tensor by the mean over members; every member gets bit-identical results.
  virtual void all_reduce_mean(std::vector<at::Tensor>& tensors) = 0;
  // Copies root's tensors into every member's.
  virtual void broadcast(std::vector<at::Tensor>& tensors, int root) = 0;
  // Sum of one number over members (counters, error flags).
  virtual double all_reduce_sum(double value) = 0;
  // Starts replacing the 1-d buffer `flat` by its mean over members, bit-identical on every
  // member; the buffer must stay untouched until wait() returns. Members start their
  // buffers in the same order, and may start several before waiting; they wait for them in
  // that order too (a wait moves only its own reduction along; progress() may be called in
  // any order). The default runs
  // all_reduce_mean at once.
  virtual std::unique_ptr<PendingReduction> start_all_reduce_mean(at::Tensor flat);
  // Whether start_all_reduce_mean may be called from a thread other than the one that
  // made the communicator (autograd runs a GPU backward on threads of its own); MPI is
  // initialised for one calling thread only.
  virtual bool starts_on_any_thread() const { return false; }
};

}  // namespace kvrl
