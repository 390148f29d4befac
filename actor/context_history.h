// The recent observations of one stream's current context, on the host: what an actor
// needs to send a fragment's context prefix and to rebuild the stream's cache after new
// weights, without reading anything back from the policy's device. Keeps the last
// `capacity` observations in amortised O(1) per step, whatever the episode's length.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/wire/observation_values.h"

namespace kvrl {

class ContextHistory {
 public:
  ContextHistory(int64_t observation_size, int64_t capacity);

  // The next step starts a new context.
  void restart();
  // One step of the context: observation_size floats.
  void push(const float* observation);
  // Steps since the context started, and how many of the latest of them are kept.
  int64_t steps() const { return steps_; }
  int64_t kept() const;
  // The last n kept observations, oldest first, appended to `out`. n <= kept().
  void append_last(int64_t n, ObservationValues& out) const;
  // The same, written to `out` (n * observation_size floats).
  void copy_last(int64_t n, float* out) const;

 private:
  // The last n kept observations; throws InvalidArgumentError when n > kept().
  std::span<const float> last(int64_t n) const;

  int64_t observation_size_;
  int64_t capacity_;
  int64_t steps_ = 0;
  std::size_t first_ = 0;  // index in buffer_ of the oldest kept observation
  std::vector<float> buffer_;
};

}  // namespace kvrl
