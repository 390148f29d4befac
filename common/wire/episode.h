// One complete episode as an actor recorded it: what crosses from actors to learners.
// Plain vectors, no tensors, so that encoding, decoding and queueing touch no LibTorch.
#pragma once

#include <cstdint>
#include <vector>

namespace kvrl {

struct Episode {
  int64_t actor_rank = 0;
  uint64_t episode_id = 0;       // per actor, counting from 0
  int64_t observation_size = 0;  // floats per observation
  int64_t action_size = 0;       // floats per action (1 for a discrete index)

  std::vector<float> observations;  // [T, observation_size]: what the policy saw
  std::vector<float> actions;       // [T, action_size]
  std::vector<float> rewards;       // [T]
  std::vector<uint8_t> terminated;  // [T]: only the last step may be set
  std::vector<uint8_t> truncated;   // [T]: only the last step may be set
  // [T]: where the acting policy's context started: the first step, and any later step at
  // which the actor restarted its streams' contexts (new weights with
  // actor.keep_context_on_update=false), so that the learner attends as the actor did.
  std::vector<uint8_t> is_init;
  std::vector<float> behaviour_log_probs;  // [T]: log mu(a_t | history) of the acting policy
  std::vector<float> values;               // [T]: the acting policy's value estimates
  std::vector<int64_t> policy_versions;    // [T]: version of the weights that acted
  std::vector<float> final_observation;    // [observation_size]: seen after the last step

  int64_t length() const { return static_cast<int64_t>(rewards.size()); }
  double episode_return() const;
  // The oldest policy version that acted in the episode: its policy lag is measured from it.
  int64_t oldest_policy_version() const;
};

}  // namespace kvrl
