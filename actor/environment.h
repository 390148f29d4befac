// The single-environment API. An Environment steps one episode at a time; the base class
// validates actions against the action space and applies the time limit, so subclasses
// write only their dynamics (as Gymnasium's TimeLimit wrapper does for its classic
// control suite). VectorEnv runs B of them with automatic resets.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "actor/space.h"

namespace kvrl {

// Per-environment options by name, e.g. {"corridor_length": 10}.
using EnvOptions = std::map<std::string, double>;

struct StepResult {
  double reward = 0.0;
  bool terminated = false;  // the task ended (a terminal state): no bootstrapping
  bool truncated = false;   // cut short by the time limit: bootstrap from the last state
};

// Throws InvalidArgumentError, naming `env`, unless `action` is in `space`: the right
// number of values; a whole index below n (discrete); finite values (a box, whose bounds
// the environment enforces by clipping, as Gymnasium's do).
void check_action_in_space(const std::string& env, const Space& space, std::span<const float> action);

class Environment {
 public:
  virtual ~Environment() = default;

  virtual std::string name() const = 0;
  virtual const Space& observation_space() const = 0;
  virtual const Space& action_space() const = 0;
  // Steps after which an episode is truncated, as the environment declares it; 0 means no limit.
  virtual int64_t time_limit() const = 0;
  // The limit in force: the declared one, unless overridden (env.options.max_episode_steps).
  int64_t episode_step_limit() const {
    return step_limit_override_ >= 0 ? step_limit_override_ : time_limit();
  }
  // Truncates episodes after `steps` steps instead (0: never); -1 restores the declared limit.
  // Throws InvalidArgumentError below -1.
  void override_step_limit(int64_t steps);

  // Starts an episode; the same seed gives the same episode. Writes the first observation.
  void reset(uint64_t seed, std::span<float> observation);
  // Advances one step. `action` holds action_space().flat_size() floats (a discrete action
  // is its index). Throws InvalidArgumentError for an action outside the space, or when
  // called before reset() or after the episode ended.
  StepResult step(std::span<const float> action, std::span<float> observation);

  // Sets the physical state (e.g. CartPole's x, x_dot, theta, theta_dot) and writes the
  // observation of that state, so tests can start from the same state as a reference.
  // The step counter is not changed. Throws InvalidArgumentError where unsupported.
  virtual void set_state(std::span<const double> state, std::span<float> observation);

  int64_t elapsed_steps() const { return elapsed_steps_; }

 protected:
  virtual void reset_dynamics(uint64_t seed, std::span<float> observation) = 0;
  // `action` has been checked against the action space; truncation is the base's job.
  virtual StepResult step_dynamics(std::span<const float> action, std::span<float> observation) = 0;

 private:
  void check_action(std::span<const float> action) const;

  int64_t elapsed_steps_ = 0;
  int64_t step_limit_override_ = -1;
  bool in_episode_ = false;
};

}  // namespace kvrl
