// B environments stepped together, with automatic resets. After each step the
// observation of an environment whose episode ended is already the first observation of
// its next episode, flagged in is_init() (as TorchRL's InitTracker does), and the ended
// episode's last observation is kept in final_observations() for bootstrapping a
// truncated episode. Termination and truncation stay apart.
//
// Episode e of environment i is reset with a seed derived from (seed, i, e), so the same
// seed gives the same episodes. Not thread-safe; one per actor.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "actor/environment.h"

namespace kvrl {

class VectorEnv {
 public:
  // Throws InvalidArgumentError when `envs` is empty or their spaces differ.
  VectorEnv(std::vector<std::unique_ptr<Environment>> envs, uint64_t seed);

  // Starts an episode in every environment; every is_init() is true afterwards.
  void reset();
  // actions: num_envs() * action_size() floats, environment-major. Throws
  // InvalidArgumentError (naming the environment) for an action outside the space.
  void step(std::span<const float> actions);

  int64_t num_envs() const { return static_cast<int64_t>(envs_.size()); }
  int64_t observation_size() const { return observation_size_; }
  int64_t action_size() const { return action_size_; }
  const Space& observation_space() const { return envs_.front()->observation_space(); }
  const Space& action_space() const { return envs_.front()->action_space(); }
  const Environment& env(int64_t index) const { return *envs_[index]; }

  // [num_envs, observation_size], row-major: what the policy sees next.
  const std::vector<float>& observations() const { return observations_; }
  // Of the last step, per environment.
  const std::vector<double>& rewards() const { return rewards_; }
  const std::vector<uint8_t>& terminated() const { return terminated_; }
  const std::vector<uint8_t>& truncated() const { return truncated_; }
  // Whether observations() row i begins an episode.
  const std::vector<uint8_t>& is_init() const { return is_init_; }
  // Rows of environments whose episode ended on the last step hold its final observation.
  const std::vector<float>& final_observations() const { return final_observations_; }

 private:
  void reset_env(int64_t index);

  std::vector<std::unique_ptr<Environment>> envs_;
  uint64_t seed_;
  int64_t observation_size_;
  int64_t action_size_;
  std::vector<uint64_t> episodes_started_;
  std::vector<float> observations_;
  std::vector<float> final_observations_;
  std::vector<double> rewards_;
  std::vector<uint8_t> terminated_, truncated_, is_init_;
};

}  // namespace kvrl
