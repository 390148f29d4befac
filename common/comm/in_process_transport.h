// Ranks as threads of one process: each rank has an inbox of at most `inbox_bound`
// messages; a send to a full inbox waits in the sender's outbox until the receiver has
// polled, as an MPI send waits for its receiver, and flush() gives up after a deadline
// naming the rank that did not receive. Lets ActorLoop and LearnerLoop run and be tested
// without mpiexec (tests/loops/in_process_loops_test.cpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "common/comm/transport.h"

namespace kvrl {

class InProcessNetwork {
 public:
  InProcessNetwork(int ranks, size_t inbox_bound, double flush_timeout_s = 60);
  int size() const { return static_cast<int>(inboxes_.size()); }
  size_t inbox_bound() const { return inbox_bound_; }
  // The most messages rank `rank`'s inbox ever held at once.
  size_t inbox_high_water(int rank) const;
  // From now on every rank's send, poll and flush throw Error, as MPI calls fail once a
  // peer has died: a rank that fails takes the others down instead of leaving them waiting.
  void close() { closed_ = true; }

 private:
  friend class InProcessTransport;
  struct Inbox {
    mutable std::mutex mutex;
    std::deque<Message> messages;
    size_t high_water = 0;
  };
  // Delivers unless the inbox is full; returns whether it did.
  bool try_deliver(int destination, Message& message);
  std::optional<Message> take(int rank);

  void throw_if_closed(int rank) const;

  std::atomic<bool> closed_{false};
  size_t inbox_bound_;
  double flush_timeout_s_;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
};

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
