#include "actor/context_history.h"

#include <algorithm>

#include "common/support/errors.h"

namespace kvrl {

ContextHistory::ContextHistory(int64_t observation_size, int64_t capacity)
    : observation_size_(observation_size), capacity_(capacity) {
  if (observation_size < 1 || capacity < 0) {
    throw InvalidArgumentError("ContextHistory needs observation_size >= 1 and capacity >= 0, got " +
                               std::to_string(observation_size) + " and " + std::to_string(capacity));
  }
}

void ContextHistory::restart() {
  steps_ = 0;
  first_ = 0;
  buffer_.clear();
}

void ContextHistory::push(const float* observation) {
  ++steps_;
  if (capacity_ == 0) return;
  buffer_.insert(buffer_.end(), observation, observation + observation_size_);
  if (kept() == capacity_ && static_cast<int64_t>(buffer_.size() - first_) > capacity_ * observation_size_) {
    first_ += static_cast<size_t>(observation_size_);
  }
  // Compact once the dropped prefix outgrows what is kept: each float moves O(1) times.
  if (static_cast<int64_t>(first_) > capacity_ * observation_size_) {
    buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(first_));
    first_ = 0;
  }
}

int64_t ContextHistory::kept() const { return std::min(steps_, capacity_); }

std::span<const float> ContextHistory::last(int64_t n) const {
  if (n < 0 || n > kept()) {
    throw InvalidArgumentError("ContextHistory keeps " + std::to_string(kept()) + " steps, asked for " +
                               std::to_string(n));
  }
  return std::span<const float>(buffer_).last(static_cast<size_t>(n * observation_size_));
}

void ContextHistory::copy_last(int64_t n, float* out) const { std::ranges::copy(last(n), out); }

void ContextHistory::append_last(int64_t n, ObservationValues& out) const { out.append(last(n)); }

}  // namespace kvrl
