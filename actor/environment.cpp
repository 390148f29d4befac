#include "actor/environment.h"

#include <cmath>

#include "common/support/errors.h"

namespace kvrl {

void Environment::reset(uint64_t seed, std::span<float> observation) {
  if (static_cast<int64_t>(observation.size()) != observation_space().flat_size()) {
    throw InvalidArgumentError(name() + ": observation buffer holds " + std::to_string(observation.size()) +
                               " floats, the space needs " + std::to_string(observation_space().flat_size()));
  }
  reset_dynamics(seed, observation);
  elapsed_steps_ = 0;
  in_episode_ = true;
}

StepResult Environment::step(std::span<const float> action, std::span<float> observation) {
  if (!in_episode_) {
    throw InvalidArgumentError(name() + ": step() called outside an episode: call reset() first");
  }
  check_action(action);
  StepResult result = step_dynamics(action, observation);
  ++elapsed_steps_;
  const int64_t limit = episode_step_limit();
  if (limit > 0 && elapsed_steps_ >= limit) result.truncated = true;
  // Gymnasium lets both be set (a goal reached on the last allowed step, as MiniGrid's can
  // be): the episode ended in a terminal state, which is not bootstrapped.
  result.truncated = result.truncated && !result.terminated;
  if (result.terminated || result.truncated) in_episode_ = false;
  return result;
}

void Environment::override_step_limit(int64_t steps) {
  if (steps < -1) {
    throw InvalidArgumentError(name() + ": max_episode_steps (" + std::to_string(steps) +
                               ") must be -1 (the declared limit), 0 (none) or a positive step count");
  }
  step_limit_override_ = steps;
}

void Environment::set_state(std::span<const double>, std::span<float>) {
  throw InvalidArgumentError(name() + " does not support set_state()");
}

void Environment::check_action(std::span<const float> action) const {
  check_action_in_space(name(), action_space(), action);
}

void check_action_in_space(const std::string& env, const Space& space, std::span<const float> action) {
  if (static_cast<int64_t>(action.size()) != space.flat_size()) {
    throw InvalidArgumentError(env + ": action has " + std::to_string(action.size()) +
                               " values, the action space " + space.describe() + " needs " +
                               std::to_string(space.flat_size()));
  }
  if (space.is_discrete()) {
    const float index = action[0];
    if (!(index >= 0 && index < static_cast<float>(space.n)) || index != std::floor(index)) {
      throw InvalidArgumentError(env + ": action " + std::to_string(index) + " is not in " +
                                 space.describe());
    }
    return;
  }
  for (float value : action) {
    if (!std::isfinite(value)) throw InvalidArgumentError(env + ": action holds a non-finite value");
  }
}

}  // namespace kvrl
