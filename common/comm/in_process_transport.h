// One rank's end of an InProcessNetwork (ranks as threads of one process): a send to a
// full inbox waits in the sender's outbox until the receiver has polled, as an MPI send
// waits for its receiver, and flush() gives up after a deadline naming the rank that did
// not receive. Lets ActorLoop and LearnerLoop run and be tested
// without mpiexec (tests/loops/in_process_loops_test.cpp).
#pragma once

#include <cstddef>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "common/comm/in_process_network.h"
#include "common/comm/transport.h"

namespace kvrl {

class InProcessTransport : public Transport {
 public:
  // `network` must outlive the transport.
  InProcessTransport(InProcessNetwork& network, int rank);
  ~InProcessTransport() override;

  int rank() const override { return rank_; }
  int size() const override { return network_.size(); }
  void send(int destination, MessageTag tag, std::vector<uint8_t> bytes) override;
  std::optional<Message> poll() override;
  size_t progress() override;
  void flush() override;

 private:
  struct PendingSend {
    int destination;
    Message message;
  };
  InProcessNetwork& network_;
  int rank_;
  std::deque<PendingSend> outbox_;
};

}  // namespace kvrl
