// The episode wire format between actors and learners (docs/wire_format.md): a versioned
// header, a table giving each field's dtype and shape, the field bytes, and a CRC-32 over
// everything before it. The decoder checks every size, dtype and shape against the
// configured spec, and the content (flags, finiteness), so a bad message becomes a
// MalformedMessageError with a reason to count, never a crash or a stall.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "common/wire/episode.h"

namespace kvrl {

struct EpisodeSpec {
  int64_t observation_size = 0;
  int64_t action_size = 0;
  int64_t max_length = 0;       // the longest episode or fragment accepted
  int64_t max_context = 0;      // the longest context prefix a fragment may carry (the policy's reach)
  int64_t streams = 1;          // environments per actor: a fragment's stream is below this
  int64_t segment_steps = 0;    // a context holds at most this many steps (segment policy); 0: no bound
  bool whole_episodes = false;  // every message ends its episode (actor.fragment_steps = 0)
  ObservationElement observation_element = ObservationElement::kFloat32;  // as the environment declares
};

class EpisodeCodec {
 public:
  static constexpr uint32_t kMagic = 0x5045564b;  // "KVEP" in little-endian bytes
  // 2: fragments (stream, first step, return before, context prefix).
  static constexpr uint16_t kVersion = 2;

  // Throws InvalidArgumentError when a spec size is not positive (max_context may be 0).
  explicit EpisodeCodec(EpisodeSpec spec);

  // Throws InvalidArgumentError when the episode does not fit the spec (a bug in the caller).
  std::vector<uint8_t> encode(const Episode& episode) const;
  // Throws MalformedMessageError naming what is wrong; never reads past `message`.
  Episode decode(std::span<const uint8_t> message) const;

  const EpisodeSpec& spec() const { return spec_; }

 private:
  EpisodeSpec spec_;
};

}  // namespace kvrl
