// `kvrl env-rollout IN.pt OUT.pt`: rolls out one kvrl environment from a given state with
// given actions, so tests can compare it with Gymnasium or POPGym step by step; or draws
// many initial observations from kvrl's own reset, so tests can compare the distributions.
#pragma once

#include <string>

namespace kvrl {

// IN: {"name": str or "plugin": path, "options": dict (optional), "state": float64 tensor (optional;
// without it the episode starts from reset("seed", default 0)), "actions":
// float tensor [T, action_size], "states": optional float64 [T, state_size], the state
// each step starts from}. OUT: {"initial_observation": [obs], "observations":
// [T', obs], "rewards": float64 [T'], "terminated": bool [T'], "truncated": bool [T']},
// stopping after the first step that ends the episode (T' <= T).
// Reset mode, IN: {"name" or "plugin", "options" (optional), "resets": int in [1, 100000],
// "seed": int (optional, default 0)} and no other key. OUT: {"observations": float32
// [resets, obs]}, the first observations of `resets` environments reset by kvrl's own RNG
// with the seeds an actor's VectorEnv derives from `seed`.
// Throws MalformedInputError / InvalidArgumentError naming the bad key.
void run_env_rollout(const std::string& in_path, const std::string& out_path);

}  // namespace kvrl
