// B environments stepped together, with automatic resets. After each step the
// observation of an environment whose episode ended is already the first observation of
// its next episode, flagged in is_init() (as TorchRL's InitTracker does), and the ended
// episode's last observation is kept in final_observations() for bootstrapping a
// truncated episode. Termination and truncation stay apart.
//
// Two kinds: NativeVectorEnv steps kvrl Environments (the built-ins, MuJoCo, plugins) in
// this thread or on a pool of threads, all together or asynchronously (send/wait_ready);
// the Gymnasium bridge (gym:<id>) steps a Python vector environment, all together.
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
  // Partial stepping: send() starts the steps of `envs` (distinct indexes) with `actions`
  // (envs.size() * action_size() floats, in the order of envs), and wait_ready() returns the
  // environments whose step finished, whose rows of observations() and the rest are then
  // current. An environment is sent again only after wait_ready() returned it. This
  // default steps every environment together: it refuses a subset (naming the counts)
  // and wait_ready() returns all of them.
  virtual void send(std::span<const int64_t> envs, std::span<const float> actions);
  virtual std::vector<int64_t> wait_ready();
  // Whether wait_ready() may return fewer environments than were sent.
  virtual bool asynchronous() const { return false; }

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
  std::vector<int64_t> sent_;  // sent and not yet returned by wait_ready()

 private:
  int64_t num_envs_;
  Space observation_space_, action_space_;
  int64_t observation_size_, action_size_;
};

// Environment i's seed in a vector seeded with `seed`: neighbouring environments get
// unrelated draws (SplitMix64). NativeVectorEnv seeds episode e of environment i with
// mix(stream_seed(seed, i) + e).
uint64_t stream_seed(uint64_t seed, int64_t index);

// How a NativeVectorEnv steps its environments (env.stepping, env.step_threads,
// env.min_ready, env.step_delay_ms).
struct NativeStepping {
  // false (lockstep): wait_ready() waits for every environment sent; true: it returns once
  // min_ready of them finished, so the policy steps whichever environments are ready.
  bool asynchronous = false;
  int64_t threads = 0;    // 0: environments step in the caller's thread, one after another
  int64_t min_ready = 1;  // asynchronous only
  // Per environment, seconds to sleep after each step (a slow environment, for benchmarks
  // and tests); empty: none.
  std::vector<double> step_delays_s;
};

class EnvStepPool;

// Environment objects stepped one after another, or by a pool of threads. Episode e of
// environment i is reset with a seed derived from (seed, i, e), so the same seed gives the
// same episodes however the environments are stepped.
class NativeVectorEnv : public VectorEnv {
 public:
  // Throws InvalidArgumentError when `envs` is empty or their spaces differ, or the
  // stepping options are invalid (naming the value).
  NativeVectorEnv(std::vector<std::unique_ptr<Environment>> envs, uint64_t seed,
                  NativeStepping stepping = {});
  ~NativeVectorEnv() override;

  std::string name() const override { return envs_.front()->name(); }
  void reset() override;
  void step(std::span<const float> actions) override;
  void send(std::span<const int64_t> envs, std::span<const float> actions) override;
  std::vector<int64_t> wait_ready() override;
  bool asynchronous() const override { return stepping_.asynchronous; }
  const Environment& env(int64_t index) const { return *envs_[index]; }

 private:
  void reset_env(int64_t index);
  // Steps environment `index` with its row of pending_actions_ and writes its rows of the
  // results, resetting it when its episode ended. Environments touch only their own rows,
  // so the pool's threads step different environments at once.
  void step_env(int64_t index);
  void check_sendable(std::span<const int64_t> envs) const;

  std::vector<std::unique_ptr<Environment>> envs_;
  uint64_t seed_;
  NativeStepping stepping_;
  std::vector<uint64_t> episodes_started_;
  std::vector<float> pending_actions_;  // [num_envs, action_size]
  std::vector<uint8_t> in_flight_;      // per environment: sent, not yet returned
  std::vector<int64_t> every_env_;      // 0 .. num_envs - 1, what step() sends
  std::unique_ptr<EnvStepPool> pool_;   // with stepping_.threads > 0
};

}  // namespace kvrl
