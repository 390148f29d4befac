#include "common/comm/in_process_transport.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "common/support/errors.h"

namespace kvrl {

InProcessTransport::InProcessTransport(InProcessNetwork& network, int rank) : network_(network), rank_(rank) {
  if (rank < 0 || rank >= network.size()) {
    throw InvalidArgumentError("rank " + std::to_string(rank) + " is not in an in-process network of " +
                               std::to_string(network.size()) + " ranks");
  }
}

InProcessTransport::~InProcessTransport() = default;  // unsent messages are dropped, as at a crash

void InProcessTransport::send(int destination, MessageTag tag, std::vector<uint8_t> bytes) {
  if (destination < 0 || destination >= network_.size()) {
    throw InvalidArgumentError("rank " + std::to_string(rank_) + " sent to rank " +
                               std::to_string(destination) + ", outside the in-process network of " +
                               std::to_string(network_.size()) + " ranks");
  }
  network_.throw_if_closed(rank_);
  outbox_.push_back({destination, Message{rank_, tag, std::move(bytes)}});
  progress();
}

std::optional<Message> InProcessTransport::poll() {
  network_.throw_if_closed(rank_);
  progress();
  return network_.take(rank_);
}

size_t InProcessTransport::progress() {
  // A full inbox holds back later messages to the same rank only, so none overtakes an
  // earlier one to its destination and none waits for another rank's reader.
  std::vector<bool> blocked(static_cast<size_t>(network_.size()), false);
  for (auto send = outbox_.begin(); send != outbox_.end();) {
    const auto destination = static_cast<size_t>(send->destination);
    if (!blocked[destination] && network_.try_deliver(send->destination, send->message)) {
      send = outbox_.erase(send);
    } else {
      blocked[destination] = true;
      ++send;
    }
  }
  return outbox_.size();
}

void InProcessTransport::flush() {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(network_.flush_timeout_s_);
  while (progress() > 0) {
    network_.throw_if_closed(rank_);
    if (std::chrono::steady_clock::now() > deadline) {
      throw Error("rank " + std::to_string(rank_) + ": " + std::to_string(outbox_.size()) +
                  " message(s) not received after " + std::to_string(network_.flush_timeout_s_) +
                  " s; rank " + std::to_string(outbox_.front().destination) + "'s inbox stayed full");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

}  // namespace kvrl
