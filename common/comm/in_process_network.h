// The network of InProcessTransport: one inbox of at most `inbox_bound` messages per rank,
// shared by the threads that play the ranks.
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

}  // namespace kvrl
