// libFuzzer target for the two decoders that read bytes from other ranks: episodes
// (actor -> learner) and weights (learner -> actor). The first input byte picks the
// decoder (bit 0) and whether to repair the CRC-32 after mutation (bit 1): without the
// repair nearly every mutation stops at the checksum, so the structural checks behind it
// would go unexercised. A decoder may only return a value or throw MalformedMessageError;
// anything else (a crash, a sanitizer report, another exception) is a finding. A decoded
// episode must also survive encode -> decode unchanged.
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "common/support/errors.h"
#include "common/wire/crc32.h"
#include "common/wire/episode_codec.h"
#include "common/wire/weights_codec.h"

namespace {

// As write_fuzz_seeds' codec: fragments with a context prefix of up to 16 steps decode.
constexpr kvrl::EpisodeSpec kSpec{
    /*observation_size=*/4, /*action_size=*/1, /*max_length=*/500,
    /*max_context=*/16,     /*streams=*/4,     /*segment_steps=*/0};
constexpr int64_t kWeights = 37;

void repair_crc(std::vector<uint8_t>& message) {
  if (message.size() < 4) return;
  const uint32_t crc = kvrl::crc32(message.data(), message.size() - 4);
  std::memcpy(message.data() + message.size() - 4, &crc, 4);
}

void check_round_trip(const kvrl::EpisodeCodec& codec, const kvrl::Episode& episode) {
  const kvrl::Episode again = codec.decode(codec.encode(episode));
  const bool same = again.actor_rank == episode.actor_rank && again.episode_id == episode.episode_id &&
                    again.rewards == episode.rewards && again.observations == episode.observations &&
                    again.actions == episode.actions && again.policy_versions == episode.policy_versions &&
                    again.is_init == episode.is_init && again.final_observation == episode.final_observation;
  if (!same) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  std::vector<uint8_t> message(data + 1, data + size);
  if (mode & 2) repair_crc(message);
  try {
    if (mode & 1) {
      const kvrl::EpisodeCodec codec(kSpec);
      check_round_trip(codec, codec.decode(message));
    } else {
      const kvrl::WeightsMessage weights = kvrl::WeightsCodec::decode(message, kWeights);
      if (weights.values.size() != kWeights) __builtin_trap();
    }
  } catch (const kvrl::MalformedMessageError&) {
    // the expected way to refuse
  }
  return 0;
}
