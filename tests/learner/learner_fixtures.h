// Episodes and models shared by the learner tests.
#pragma once

#include <cstdint>

#include "common/model/actor_critic.h"
#include "common/wire/episode.h"

namespace kvrl::fixtures {

// An episode over 2 observation features that encode (length, t), with one discrete action.
inline Episode episode_of_length(int64_t length, bool terminated = true, float reward = 1.0f) {
  Episode e;
  e.observation_size = 2;
  e.action_size = 1;
  for (int64_t t = 0; t < length; ++t) {
    e.observations.append({static_cast<float>(length), static_cast<float>(t)});
    e.actions.push_back(0);
    e.rewards.push_back(reward);
    e.terminated.push_back(terminated && t == length - 1);
    e.truncated.push_back(!terminated && t == length - 1);
    e.is_init.push_back(t == 0);
    e.behaviour_log_probs.push_back(-0.5f);
    e.values.push_back(0);
    e.policy_versions.push_back(3);
  }
  e.final_observation = {-1.0f, -1.0f};
  return e;
}

// A two-action ActorCritic over 2 observation features.
inline ActorCriticOptions two_action_model(int64_t hidden_size, int64_t max_seq_len) {
  ActorCriticOptions options;
  options.transformer.input_size = 2;
  options.transformer.hidden_size = hidden_size;
  options.transformer.num_heads = 2;
  options.transformer.max_seq_len = max_seq_len;
  options.num_outputs = 2;
  return options;
}

}  // namespace kvrl::fixtures
