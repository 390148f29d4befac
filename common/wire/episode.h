// One episode, or one fragment of a long one, as an actor recorded it: what crosses from
// actors to learners. A fragment carries the observations of the steps before it that its
// first step attended to (its context prefix: burn-in tokens the learner attends over and
// trains nothing on), so a learner rebuilds what the actor computed from the message alone.
// Observations keep the environment's element type (float32, or uint8 for images).
// Plain vectors, no tensors, so that encoding, decoding and queueing touch no LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "common/wire/observation_values.h"

namespace kvrl {

struct Episode {
  int64_t actor_rank = 0;
  uint64_t episode_id = 0;       // per actor, counting from 0
  int64_t observation_size = 0;  // values per observation
  int64_t action_size = 0;       // floats per action (1 for a discrete index)
  int64_t stream = 0;            // the actor's environment the steps came from
  int64_t first_step = 0;        // the first step's number in its episode (0: the episode starts)
  double return_before = 0;      // rewards of the episode's steps before first_step

  // [context_length, observation_size]: the observations of the steps right before
  // first_step that the first step's context held; empty when the first step starts a context.
  ObservationValues context_observations;

  ObservationValues observations;   // [T, observation_size]: what the policy saw
  std::vector<float> actions;       // [T, action_size]
  std::vector<float> rewards;       // [T]
  std::vector<uint8_t> terminated;  // [T]: only the last step may be set
  std::vector<uint8_t> truncated;   // [T]: only the last step may be set; neither: the episode goes on
  // [T]: where the acting policy's context started: the episode's first step, and any step
  // at which the actor restarted the stream's context (a segment's end, or new weights
  // with actor.on_weight_update=restart), so that the learner attends as the actor did.
  std::vector<uint8_t> is_init;
  std::vector<float> behaviour_log_probs;  // [T]: log mu(a_t | history) of the acting policy
  std::vector<float> values;               // [T]: the acting policy's value estimates
  std::vector<int64_t> policy_versions;    // [T]: version of the weights that acted
  // [observation_size]: seen after the last step (the next step's, when the episode goes on)
  ObservationValues final_observation;

  int64_t length() const { return static_cast<int64_t>(rewards.size()); }
  int64_t context_length() const;
  // Whether the last step ended the episode (terminated or truncated).
  bool ends_episode() const;
  // The rewards of the episode up to this fragment's last step.
  double episode_return() const;
  // The oldest policy version that acted in the episode: its policy lag is measured from it.
  int64_t oldest_policy_version() const;
};

}  // namespace kvrl
