// B environments stepped together, with automatic resets. After each step the
// observation of an environment whose episode ended is already the first observation of
// its next episode, flagged in is_init() (as TorchRL's InitTracker does), and the ended
// episode's last observation is kept in final_observations() for bootstrapping a
// truncated episode. Termination and truncation stay apart.
//
// Two kinds: NativeVectorEnv steps kvrl Environments in this thread (the built-ins,
// MuJoCo, plugins); the Gymnasium bridge (gym:<id>) steps a Python vector environment.
// Not thread-safe; one per actor.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "actor/environment.h"

namespace kvrl {

class VectorEnv {
 public:
  virtual ~VectorEnv() = default;
  VectorEnv(const VectorEnv&) = delete;
  VectorEnv& operator=(const VectorEnv&) = delete;

  // The environments' name, for logs.
  virtual std::string name() const = 0;
  // Starts an episode in every environment; every is_init() is true afterwards.
  virtual void reset() = 0;
  // actions: num_envs() * action_size() floats, environment-major. Throws
  // InvalidArgumentError (naming the environment) for an action outside the space.
  virtual void step(std::span<const float> actions) = 0;

  int64_t num_envs() const { return num_envs_; }
  int64_t observation_size() const { return observation_size_; }
  int64_t action_size() const { return action_size_; }
  const Space& observation_space() const { return observation_space_; }
  const Space& action_space() const { return action_space_; }

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

 protected:
  VectorEnv(int64_t num_envs, Space observation_space, Space action_space);
  // Throws InvalidArgumentError unless `actions` holds num_envs() * action_size() values.
  void check_action_count(std::span<const float> actions) const;

  std::vector<float> observations_;
  std::vector<float> final_observations_;
  std::vector<double> rewards_;
  std::vector<uint8_t> terminated_, truncated_, is_init_;

 private:
  int64_t num_envs_;
  Space observation_space_, action_space_;
  int64_t observation_size_, action_size_;
};

// Environment i's seed in a vector seeded with `seed`: neighbouring environments get
// unrelated draws (SplitMix64). NativeVectorEnv seeds episode e of environment i with
// mix(stream_seed(seed, i) + e).
uint64_t stream_seed(uint64_t seed, int64_t index);

// Environment objects stepped one after another. Episode e of environment i is reset with
// a seed derived from (seed, i, e), so the same seed gives the same episodes.
class NativeVectorEnv : public VectorEnv {
 public:
  // Throws InvalidArgumentError when `envs` is empty or their spaces differ.
  NativeVectorEnv(std::vector<std::unique_ptr<Environment>> envs, uint64_t seed);

  std::string name() const override { return envs_.front()->name(); }
  void reset() override;
  void step(std::span<const float> actions) override;
  const Environment& env(int64_t index) const { return *envs_[index]; }

 private:
  void reset_env(int64_t index);

  std::vector<std::unique_ptr<Environment>> envs_;
  uint64_t seed_;
  std::vector<uint64_t> episodes_started_;
};

}  // namespace kvrl
