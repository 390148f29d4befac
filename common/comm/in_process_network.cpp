#include "common/comm/in_process_network.h"

#include <algorithm>
#include <string>

#include "common/support/errors.h"

namespace kvrl {

InProcessNetwork::InProcessNetwork(int ranks, size_t inbox_bound, double flush_timeout_s)
    : inbox_bound_(inbox_bound), flush_timeout_s_(flush_timeout_s) {
  if (ranks < 1)
    throw InvalidArgumentError("an in-process network needs at least 1 rank, got " + std::to_string(ranks));
  if (inbox_bound < 1) throw InvalidArgumentError("an in-process inbox must hold at least 1 message, got 0");
  for (int r = 0; r < ranks; ++r) inboxes_.push_back(std::make_unique<Inbox>());
}

size_t InProcessNetwork::inbox_high_water(int rank) const {
  const Inbox& inbox = *inboxes_.at(static_cast<size_t>(rank));
  const std::lock_guard<std::mutex> lock(inbox.mutex);
  return inbox.high_water;
}

bool InProcessNetwork::try_deliver(int destination, Message& message) {
  Inbox& inbox = *inboxes_[static_cast<size_t>(destination)];
  const std::lock_guard<std::mutex> lock(inbox.mutex);
  if (inbox.messages.size() >= inbox_bound_) return false;
  inbox.messages.push_back(std::move(message));
  inbox.high_water = std::max(inbox.high_water, inbox.messages.size());
  return true;
}

std::optional<Message> InProcessNetwork::take(int rank) {
  Inbox& inbox = *inboxes_[static_cast<size_t>(rank)];
  const std::lock_guard<std::mutex> lock(inbox.mutex);
  if (inbox.messages.empty()) return std::nullopt;
  Message message = std::move(inbox.messages.front());
  inbox.messages.pop_front();
  return message;
}

void InProcessNetwork::throw_if_closed(int rank) const {
  if (closed_)
    throw Error("rank " + std::to_string(rank) + ": the in-process network was closed (a rank failed)");
}

}  // namespace kvrl
