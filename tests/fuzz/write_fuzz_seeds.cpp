// Writes valid messages, each prefixed with the fuzz target's mode byte, as the starting
// corpus: from valid messages the fuzzer's mutations reach every check of the decoders.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/wire/episode_codec.h"
#include "common/wire/weights_codec.h"
#include "tests/common/sample_episode.h"

namespace {

void write(const std::string& path, uint8_t mode, const std::vector<uint8_t>& message) {
  std::ofstream out(path, std::ios::binary);
  out.put(static_cast<char>(mode));
  out.write(reinterpret_cast<const char*>(message.data()), static_cast<std::streamsize>(message.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const kvrl::EpisodeCodec codec({/*observation_size=*/4, /*action_size=*/1, /*max_length=*/500,
                                  /*max_context=*/16, /*streams=*/4, /*segment_steps=*/0});
  std::mt19937 rng(7);
  write(dir + "/episode_1", 3, codec.encode(kvrl::fixtures::sample_episode(1, false, rng)));
  write(dir + "/episode_5_truncated", 3, codec.encode(kvrl::fixtures::sample_episode(5, true, rng)));
  write(dir + "/episode_5_raw_crc", 1, codec.encode(kvrl::fixtures::sample_episode(5, false, rng)));
  // A fragment in mid-episode: it goes on after its last step and carries a context prefix.
  kvrl::Episode fragment = kvrl::fixtures::sample_episode(6, false, rng);
  fragment.truncated.back() = 0;
  fragment.first_step = 40;
  fragment.stream = 3;
  fragment.is_init[0] = 0;
  fragment.context_observations.assign(5 * 4, 0.5f);
  write(dir + "/fragment_6_context_5", 3, codec.encode(fragment));
  write(dir + "/weights_37", 2, kvrl::WeightsCodec::encode(4, std::vector<float>(37, 0.25f)));
  write(dir + "/weights_37_raw_crc", 0, kvrl::WeightsCodec::encode(4, std::vector<float>(37, -1.0f)));
  return 0;
}
