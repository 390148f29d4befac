// The collective seam between learners: gradient averaging and parameter broadcast.
// Implementations: LocalCommunicator (one learner, in-process), MpiCommunicator (CPU
// learners over MPI); the GPU path adds NCCL behind the same interface. Every method is a
// collective: all members call it in the same order, and it blocks until done.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace kvrl {

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
};

class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_mean(std::vector<at::Tensor>&) override {}
  void broadcast(std::vector<at::Tensor>&, int) override {}
  double all_reduce_sum(double value) override { return value; }
};

}  // namespace kvrl
