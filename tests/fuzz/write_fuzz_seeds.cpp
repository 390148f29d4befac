// Writes valid messages, each prefixed with the fuzz target's mode byte, as the starting
// corpus: from valid messages the fuzzer's mutations reach every check of the decoders.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/episode_codec.h"
#include "common/weights_codec.h"

namespace {

kvrl::Episode episode_of_length(int64_t length, bool truncated) {
  kvrl::Episode e;
  e.actor_rank = 2;
  e.episode_id = 11;
  e.observation_size = 4;
  e.action_size = 1;
  for (int64_t t = 0; t < length; ++t) {
    for (int i = 0; i < 4; ++i) e.observations.push_back(0.1f * static_cast<float>(t + i));
    e.actions.push_back(static_cast<float>(t % 2));
    e.rewards.push_back(1.0f);
    e.terminated.push_back(!truncated && t == length - 1);
    e.truncated.push_back(truncated && t == length - 1);
    e.is_init.push_back(t == 0);
    e.behaviour_log_probs.push_back(-0.69f);
    e.values.push_back(0.5f);
    e.policy_versions.push_back(3 + t / 2);
  }
  e.final_observation = {1, 2, 3, 4};
  return e;
}

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
  const kvrl::EpisodeCodec codec({4, 1, 500});
  write(dir + "/episode_1", 3, codec.encode(episode_of_length(1, false)));
  write(dir + "/episode_5_truncated", 3, codec.encode(episode_of_length(5, true)));
  write(dir + "/episode_5_raw_crc", 1, codec.encode(episode_of_length(5, false)));
  write(dir + "/weights_37", 2, kvrl::WeightsCodec::encode(4, std::vector<float>(37, 0.25f)));
  write(dir + "/weights_37_raw_crc", 0, kvrl::WeightsCodec::encode(4, std::vector<float>(37, -1.0f)));
  return 0;
}
