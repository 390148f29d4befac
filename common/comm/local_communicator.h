// The collectives of a run with one learner: every mean and sum is the value itself.
#pragma once

#include <vector>

#include "common/comm/communicator.h"

namespace kvrl {

class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_mean(std::vector<at::Tensor>&) override {}
  void broadcast(std::vector<at::Tensor>&, int) override {}
  double all_reduce_sum(double value) override { return value; }
};

}  // namespace kvrl
