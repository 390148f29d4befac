#include "actor/vector_env.h"

#include <algorithm>

#include "common/support/errors.h"

namespace kvrl {
namespace {

// SplitMix64: spreads (seed, env, episode) over the seed space so that neighbouring
// environments and episodes get unrelated reset draws.
uint64_t mix(uint64_t value) {
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

}  // namespace

VectorEnv::VectorEnv(std::vector<std::unique_ptr<Environment>> envs, uint64_t seed)
    : envs_(std::move(envs)), seed_(seed) {
  if (envs_.empty()) throw InvalidArgumentError("VectorEnv needs at least one environment");
  for (const auto& env : envs_) {
    if (env->observation_space() != envs_.front()->observation_space() ||
        env->action_space() != envs_.front()->action_space()) {
      throw InvalidArgumentError(
          "VectorEnv: " + env->name() + " has spaces " + env->observation_space().describe() + " / " +
          env->action_space().describe() + ", unlike the first environment's " +
          envs_.front()->observation_space().describe() + " / " + envs_.front()->action_space().describe());
    }
  }
  observation_size_ = observation_space().flat_size();
  action_size_ = action_space().flat_size();
  const size_t count = envs_.size();
  episodes_started_.assign(count, 0);
  observations_.assign(count * observation_size_, 0.0f);
  final_observations_.assign(count * observation_size_, 0.0f);
  rewards_.assign(count, 0.0);
  terminated_.assign(count, 0);
  truncated_.assign(count, 0);
  is_init_.assign(count, 0);
}

void VectorEnv::reset_env(int64_t index) {
  const uint64_t episode_seed =
      mix(mix(seed_ ^ mix(static_cast<uint64_t>(index))) + episodes_started_[index]++);
  envs_[index]->reset(episode_seed,
                      std::span<float>(observations_).subspan(index * observation_size_, observation_size_));
  is_init_[index] = 1;
}

void VectorEnv::reset() {
  for (int64_t i = 0; i < num_envs(); ++i) reset_env(i);
  std::fill(rewards_.begin(), rewards_.end(), 0.0);
  std::fill(terminated_.begin(), terminated_.end(), 0);
  std::fill(truncated_.begin(), truncated_.end(), 0);
}

void VectorEnv::step(std::span<const float> actions) {
  if (static_cast<int64_t>(actions.size()) != num_envs() * action_size_) {
    throw InvalidArgumentError("VectorEnv::step: got " + std::to_string(actions.size()) +
                               " action values, expected " + std::to_string(num_envs() * action_size_) +
                               " (" + std::to_string(num_envs()) + " environments x " +
                               std::to_string(action_size_) + ")");
  }
  for (int64_t i = 0; i < num_envs(); ++i) {
    auto observation = std::span<float>(observations_).subspan(i * observation_size_, observation_size_);
    const StepResult result = envs_[i]->step(actions.subspan(i * action_size_, action_size_), observation);
    rewards_[i] = result.reward;
    terminated_[i] = result.terminated;
    truncated_[i] = result.truncated;
    is_init_[i] = 0;
    if (result.terminated || result.truncated) {
      std::copy(observation.begin(), observation.end(), final_observations_.begin() + i * observation_size_);
      reset_env(i);
    }
  }
}

}  // namespace kvrl
