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

uint64_t stream_seed(uint64_t seed, int64_t index) { return mix(seed ^ mix(static_cast<uint64_t>(index))); }

VectorEnv::VectorEnv(int64_t num_envs, Space observation_space, Space action_space)
    : num_envs_(num_envs),
      observation_space_(std::move(observation_space)),
      action_space_(std::move(action_space)),
      observation_size_(observation_space_.flat_size()),
      action_size_(action_space_.flat_size()) {
  if (num_envs < 1) throw InvalidArgumentError("VectorEnv needs at least one environment");
  const auto count = static_cast<size_t>(num_envs);
  observations_.assign(count * observation_size_, 0.0f);
  final_observations_.assign(count * observation_size_, 0.0f);
  rewards_.assign(count, 0.0);
  terminated_.assign(count, 0);
  truncated_.assign(count, 0);
  is_init_.assign(count, 0);
}

void VectorEnv::check_action_count(std::span<const float> actions) const {
  if (static_cast<int64_t>(actions.size()) != num_envs() * action_size_) {
    throw InvalidArgumentError("VectorEnv::step: got " + std::to_string(actions.size()) +
                               " action values, expected " + std::to_string(num_envs() * action_size_) +
                               " (" + std::to_string(num_envs()) + " environments x " +
                               std::to_string(action_size_) + ")");
  }
}

namespace {

// The first environment, whose spaces all the others must share.
const Environment& first_of(const std::vector<std::unique_ptr<Environment>>& envs) {
  if (envs.empty()) throw InvalidArgumentError("VectorEnv needs at least one environment");
  return *envs.front();
}

}  // namespace

NativeVectorEnv::NativeVectorEnv(std::vector<std::unique_ptr<Environment>> envs, uint64_t seed)
    : VectorEnv(static_cast<int64_t>(envs.size()), first_of(envs).observation_space(),
                first_of(envs).action_space()),
      envs_(std::move(envs)),
      seed_(seed),
      episodes_started_(envs_.size(), 0) {
  for (const auto& env : envs_) {
    if (env->observation_space() != observation_space() || env->action_space() != action_space()) {
      throw InvalidArgumentError("VectorEnv: " + env->name() + " has spaces " +
                                 env->observation_space().describe() + " / " +
                                 env->action_space().describe() + ", unlike the first environment's " +
                                 observation_space().describe() + " / " + action_space().describe());
    }
  }
}

void NativeVectorEnv::reset_env(int64_t index) {
  const uint64_t episode_seed = mix(stream_seed(seed_, index) + episodes_started_[index]++);
  envs_[index]->reset(
      episode_seed, std::span<float>(observations_).subspan(index * observation_size(), observation_size()));
  is_init_[index] = 1;
}

void NativeVectorEnv::reset() {
  for (int64_t i = 0; i < num_envs(); ++i) reset_env(i);
  std::fill(rewards_.begin(), rewards_.end(), 0.0);
  std::fill(terminated_.begin(), terminated_.end(), 0);
  std::fill(truncated_.begin(), truncated_.end(), 0);
}

void NativeVectorEnv::step(std::span<const float> actions) {
  check_action_count(actions);
  const int64_t obs_size = observation_size(), act_size = action_size();
  for (int64_t i = 0; i < num_envs(); ++i) {
    auto observation = std::span<float>(observations_).subspan(i * obs_size, obs_size);
    const StepResult result = envs_[i]->step(actions.subspan(i * act_size, act_size), observation);
    rewards_[i] = result.reward;
    terminated_[i] = result.terminated;
    truncated_[i] = result.truncated;
    is_init_[i] = 0;
    if (result.terminated || result.truncated) {
      std::copy(observation.begin(), observation.end(), final_observations_.begin() + i * obs_size);
      reset_env(i);
    }
  }
}

}  // namespace kvrl
