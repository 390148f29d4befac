// Links kvrl's installed libraries from outside its tree: encodes and decodes an episode.
#include <cstdio>

#include "common/wire/episode_codec.h"

int main() {
  kvrl::Episode episode;
  episode.observation_size = 1;
  episode.action_size = 1;
  episode.observations = {0.5f};
  episode.actions = {1.0f};
  episode.rewards = {1.0f};
  episode.terminated = {true};
  episode.truncated = {false};
  episode.is_init = {true};
  episode.behaviour_log_probs = {-0.7f};
  episode.values = {0.0f};
  episode.policy_versions = {0};
  episode.final_observation = {1.0f};
  const kvrl::EpisodeCodec codec({1, 1, 10});
  const kvrl::Episode decoded = codec.decode(codec.encode(episode));
  std::printf("decoded an episode of length %lld\n", static_cast<long long>(decoded.length()));
  return decoded.length() == 1 ? 0 : 1;
}
