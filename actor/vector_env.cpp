#include "actor/vector_env.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <thread>
#include <utility>

#include "actor/env_step_pool.h"
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

void VectorEnv::send(std::span<const int64_t> envs, std::span<const float> actions) {
  bool all_in_order = static_cast<int64_t>(envs.size()) == num_envs();
  for (size_t i = 0; all_in_order && i < envs.size(); ++i) all_in_order = envs[i] == static_cast<int64_t>(i);
  if (!all_in_order) {
    throw InvalidArgumentError("VectorEnv::send: " + name() + " steps its " + std::to_string(num_envs()) +
                               " environments together, in order; got " + std::to_string(envs.size()) +
                               " environment(s) (partial stepping needs a native environment)");
  }
  step(actions);
  sent_.assign(envs.begin(), envs.end());
}

std::vector<int64_t> VectorEnv::wait_ready() { return std::exchange(sent_, {}); }

namespace {

void check_stepping(const NativeStepping& stepping, int64_t num_envs) {
  if (stepping.threads < 0) {
    throw InvalidArgumentError("NativeVectorEnv: threads (" + std::to_string(stepping.threads) +
                               ") must be 0 (the caller's thread) or more");
  }
  if (stepping.min_ready < 1) {
    throw InvalidArgumentError("NativeVectorEnv: min_ready (" + std::to_string(stepping.min_ready) +
                               ") must be at least 1");
  }
  if (!stepping.step_delays_s.empty() && static_cast<int64_t>(stepping.step_delays_s.size()) != num_envs) {
    throw InvalidArgumentError("NativeVectorEnv: " + std::to_string(stepping.step_delays_s.size()) +
                               " step delays for " + std::to_string(num_envs) + " environments");
  }
}

// The first environment, whose spaces all the others must share.
const Environment& first_of(const std::vector<std::unique_ptr<Environment>>& envs) {
  if (envs.empty()) throw InvalidArgumentError("VectorEnv needs at least one environment");
  return *envs.front();
}

}  // namespace

NativeVectorEnv::NativeVectorEnv(std::vector<std::unique_ptr<Environment>> envs, uint64_t seed,
                                 NativeStepping stepping)
    : VectorEnv(static_cast<int64_t>(envs.size()), first_of(envs).observation_space(),
                first_of(envs).action_space()),
      envs_(std::move(envs)),
      seed_(seed),
      stepping_(std::move(stepping)),
      episodes_started_(envs_.size(), 0),
      pending_actions_(envs_.size() * action_size(), 0.0f),
      in_flight_(envs_.size(), 0) {
  check_stepping(stepping_, num_envs());
  every_env_.resize(num_envs());
  std::iota(every_env_.begin(), every_env_.end(), 0);
  for (const auto& env : envs_) {
    if (env->observation_space() != observation_space() || env->action_space() != action_space()) {
      throw InvalidArgumentError("VectorEnv: " + env->name() + " has spaces " +
                                 env->observation_space().describe() + " / " +
                                 env->action_space().describe() + ", unlike the first environment's " +
                                 observation_space().describe() + " / " + action_space().describe());
    }
  }
  if (stepping_.threads > 0) {
    pool_ = std::make_unique<EnvStepPool>(stepping_.threads, [this](int64_t index) { step_env(index); });
  }
}

void NativeVectorEnv::reset_env(int64_t index) {
  const uint64_t episode_seed = mix(stream_seed(seed_, index) + episodes_started_[index]++);
  envs_[index]->reset(
      episode_seed, std::span<float>(observations_).subspan(index * observation_size(), observation_size()));
  is_init_[index] = 1;
}

NativeVectorEnv::~NativeVectorEnv() = default;

void NativeVectorEnv::reset() {
  while (!wait_ready().empty()) {
  }  // no environment may be stepping while they reset
  for (int64_t i = 0; i < num_envs(); ++i) reset_env(i);
  std::fill(rewards_.begin(), rewards_.end(), 0.0);
  std::fill(terminated_.begin(), terminated_.end(), 0);
  std::fill(truncated_.begin(), truncated_.end(), 0);
}

void NativeVectorEnv::step_env(int64_t index) {
  const int64_t obs_size = observation_size(), act_size = action_size();
  auto observation = std::span<float>(observations_).subspan(index * obs_size, obs_size);
  const StepResult result = envs_[index]->step(
      std::span<const float>(pending_actions_).subspan(index * act_size, act_size), observation);
  rewards_[index] = result.reward;
  terminated_[index] = result.terminated;
  truncated_[index] = result.truncated;
  is_init_[index] = 0;
  if (result.terminated || result.truncated) {
    std::copy(observation.begin(), observation.end(), final_observations_.begin() + index * obs_size);
    reset_env(index);
  }
  if (!stepping_.step_delays_s.empty() && stepping_.step_delays_s[index] > 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(stepping_.step_delays_s[index]));
  }
}

void NativeVectorEnv::step(std::span<const float> actions) {
  check_action_count(actions);
  send(every_env_, actions);
  int64_t returned = 0;
  while (returned < num_envs()) returned += static_cast<int64_t>(wait_ready().size());
}

void NativeVectorEnv::check_sendable(std::span<const int64_t> envs) const {
  for (const int64_t index : envs) {
    if (index < 0 || index >= num_envs()) {
      throw InvalidArgumentError("VectorEnv::send: environment " + std::to_string(index) + " is not in [0, " +
                                 std::to_string(num_envs()) + ")");
    }
    if (in_flight_[index]) {
      throw InvalidArgumentError("VectorEnv::send: environment " + std::to_string(index) +
                                 " is still stepping; send it again after wait_ready() returned it");
    }
  }
}

void NativeVectorEnv::send(std::span<const int64_t> envs, std::span<const float> actions) {
  const int64_t act_size = action_size();
  if (static_cast<int64_t>(actions.size()) != static_cast<int64_t>(envs.size()) * act_size) {
    throw InvalidArgumentError("VectorEnv::send: got " + std::to_string(actions.size()) +
                               " action values for " + std::to_string(envs.size()) + " environments x " +
                               std::to_string(act_size));
  }
  check_sendable(envs);
  for (size_t k = 0; k < envs.size(); ++k) {
    std::copy_n(actions.begin() + static_cast<int64_t>(k) * act_size, act_size,
                pending_actions_.begin() + envs[k] * act_size);
  }
  for (const int64_t index : envs) {
    if (pool_) {
      pool_->submit(index);
    } else {
      step_env(index);  // may throw for a bad action: then this environment is not in flight
      sent_.push_back(index);
    }
    in_flight_[index] = 1;
  }
}

std::vector<int64_t> NativeVectorEnv::wait_ready() {
  std::vector<int64_t> ready = std::exchange(sent_, {});
  if (pool_) ready = pool_->wait(stepping_.asynchronous ? stepping_.min_ready : pool_->in_flight());
  for (const int64_t index : ready) in_flight_[index] = 0;
  // The pool returns environments as they finished; in lockstep the caller gets them in
  // index order, as from the caller's own thread.
  if (!stepping_.asynchronous) std::sort(ready.begin(), ready.end());
  return ready;
}

}  // namespace kvrl
