// A well-formed episode over 4 observation features and one discrete action, as an actor
// records it: what the codec tests and the fuzz target's seed corpus start from. No
// LibTorch and no GoogleTest, so the fuzz project (tests/fuzz) can include it.
#pragma once

#include <cstdint>
#include <random>

#include "common/wire/episode.h"

namespace kvrl::fixtures {

inline Episode sample_episode(int64_t length, bool truncated, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  Episode e;
  e.actor_rank = 3;
  e.episode_id = 17;
  e.observation_size = 4;
  e.action_size = 1;
  for (int64_t t = 0; t < length; ++t) {
    for (int i = 0; i < 4; ++i) e.observations.push_back(normal(rng));
    e.actions.push_back(static_cast<float>(t % 2));
    e.rewards.push_back(1.0f);
    e.terminated.push_back(!truncated && t == length - 1);
    e.truncated.push_back(truncated && t == length - 1);
    e.is_init.push_back(t == 0);
    e.behaviour_log_probs.push_back(-0.69f);
    e.values.push_back(normal(rng));
    e.policy_versions.push_back(5 + t / 4);
  }
  e.final_observation = {0.1f, 0.2f, 0.3f, 0.4f};
  return e;
}

}  // namespace kvrl::fixtures
