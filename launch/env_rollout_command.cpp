#include "launch/env_rollout_command.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>

#include <vector>

#include "actor/env_registry.h"
#include "actor/vector_env.h"
#include "common/io/torch_file.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

at::Tensor floats_to_tensor(const std::vector<float>& values) {
  return at::from_blob(const_cast<float*>(values.data()), {static_cast<int64_t>(values.size())}, at::kFloat)
      .clone();
}

EnvOptions parse_options(const c10::impl::GenericDict& input) {
  EnvOptions options;
  auto it = input.find("options");
  if (it == input.end()) return options;
  if (!it->value().isGenericDict()) throw MalformedInputError("input['options'] must be a dict of numbers");
  for (const auto& entry : it->value().toGenericDict()) {
    if (!entry.key().isString() || !(entry.value().isInt() || entry.value().isDouble())) {
      throw MalformedInputError("input['options'] must map option names to numbers");
    }
    options[entry.key().toStringRef()] =
        entry.value().isInt() ? static_cast<double>(entry.value().toInt()) : entry.value().toDouble();
  }
  return options;
}

at::Tensor required_tensor(const c10::impl::GenericDict& input, const std::string& key,
                           const std::string& expected) {
  auto it = input.find(key);
  if (it == input.end())
    throw MalformedInputError("input has no key '" + key + "' (expected " + expected + ")");
  if (!it->value().isTensor()) throw MalformedInputError("input['" + key + "'] must be " + expected);
  return it->value().toTensor();
}

ObservedPart observed_part_from(const c10::impl::GenericDict& input) {
  auto it = input.find("observe");
  if (it == input.end()) return ObservedPart::kAll;
  const std::string part = it->value().isString() ? it->value().toStringRef() : "<not a string>";
  if (part == "all") return ObservedPart::kAll;
  if (part == "positions") return ObservedPart::kPositions;
  if (part == "velocities") return ObservedPart::kVelocities;
  throw MalformedInputError("input['observe'] must be 'all', 'positions' or 'velocities', got '" + part +
                            "'");
}

// input[key]: a list of "module:attribute" strings (env.gym_setup, env.gym_wrappers), or none.
std::vector<std::string> python_callables(const c10::impl::GenericDict& input, const std::string& key) {
  auto it = input.find(key);
  if (it == input.end()) return {};
  std::vector<std::string> entries;
  if (it->value().isList()) {
    for (const c10::IValue& item : it->value().toListRef()) {
      if (!item.isString()) break;
      entries.push_back(item.toStringRef());
    }
    if (entries.size() == it->value().toListRef().size()) return entries;
  }
  throw MalformedInputError("input['" + key + "'] must be a list of 'module:attribute' strings");
}

std::unique_ptr<Environment> environment_from(const c10::impl::GenericDict& input) {
  EnvironmentRequest request;
  request.options = parse_options(input);
  request.gym.setup = python_callables(input, "gym_setup");
  request.gym.wrappers = python_callables(input, "gym_wrappers");
  request.locomotion.observe = observed_part_from(input);
  auto name = input.find("name");
  auto plugin = input.find("plugin");
  if (plugin != input.end() && plugin->value().isString()) {
    request.plugin = plugin->value().toStringRef();
  } else if (name != input.end() && name->value().isString()) {
    request.name = name->value().toStringRef();
  } else {
    throw MalformedInputError(
        "input needs 'name' (a built-in environment) or 'plugin' (a shared library path)");
  }
  return make_environment(request);
}

// What to roll out, read and checked from the input dict.
struct RolloutRequest {
  at::Tensor state;  // float64, or undefined: start from reset(seed), for environments without one
  int64_t seed = 0;
  at::Tensor actions;  // [T, action_size] float
  // Optional per-step start states: step t starts from states[t], so long horizons can be
  // compared without chaotic dynamics amplifying last-bit differences in cos and sin.
  at::Tensor states;
};

int64_t seed_from(const c10::impl::GenericDict& input) {
  if (!input.contains("seed")) return 0;
  if (!input.at("seed").isInt()) {
    throw MalformedInputError("input['seed'] must be an int (the reset seed), got a " +
                              input.at("seed").tagKind());
  }
  return input.at("seed").toInt();
}

RolloutRequest request_from(const c10::impl::GenericDict& input, int64_t action_size) {
  RolloutRequest request;
  if (input.contains("state")) {
    request.state = required_tensor(input, "state", "a float64 tensor").to(at::kDouble).contiguous();
  }
  request.seed = seed_from(input);
  request.actions =
      required_tensor(input, "actions", "a float tensor [T, action_size]").to(at::kFloat).contiguous();
  if (request.actions.dim() != 2 || request.actions.size(1) != action_size) {
    throw MalformedInputError("input['actions'] must be [T, " + std::to_string(action_size) + "], got " +
                              c10::str(request.actions.sizes()));
  }
  if (input.contains("states")) {
    request.states =
        required_tensor(input, "states", "a float64 tensor [T, state_size]").to(at::kDouble).contiguous();
    if (request.states.dim() != 2 || request.states.size(0) < request.actions.size(0)) {
      throw MalformedInputError("input['states'] must be [T >= " + std::to_string(request.actions.size(0)) +
                                ", state_size], got " + c10::str(request.states.sizes()));
    }
  }
  return request;
}

at::Tensor flags_tensor(const std::vector<bool>& flags) {
  std::vector<uint8_t> bytes(flags.begin(), flags.end());
  return at::tensor(bytes).to(at::kBool);
}

// Steps `env` through the request's actions until the episode ends; the output dict.
c10::impl::GenericDict roll_out(Environment& env, const RolloutRequest& request) {
  const int64_t observation_size = env.observation_space().flat_size();
  const int64_t action_size = env.action_space().flat_size();
  std::vector<float> observation(observation_size);
  env.reset(static_cast<uint64_t>(request.seed), observation);
  if (request.state.defined()) {
    env.set_state({request.state.data_ptr<double>(), static_cast<size_t>(request.state.numel())},
                  observation);
  }
  const at::Tensor initial = floats_to_tensor(observation);
  std::vector<at::Tensor> observations;
  std::vector<double> rewards;
  std::vector<bool> terminated, truncated;
  for (int64_t t = 0; t < request.actions.size(0); ++t) {
    if (request.states.defined()) {
      std::vector<float> ignored(observation_size);
      env.set_state({request.states[t].data_ptr<double>(), static_cast<size_t>(request.states.size(1))},
                    ignored);
    }
    const float* action = request.actions.data_ptr<float>() + t * action_size;
    const StepResult result = env.step({action, static_cast<size_t>(action_size)}, observation);
    observations.push_back(floats_to_tensor(observation));
    rewards.push_back(result.reward);
    terminated.push_back(result.terminated);
    truncated.push_back(result.truncated);
    if (result.terminated || result.truncated) break;
  }
  c10::impl::GenericDict output(c10::StringType::get(), c10::AnyType::get());
  output.insert("initial_observation", initial);
  output.insert("observations",
                observations.empty() ? at::empty({0, observation_size}) : at::stack(observations));
  output.insert("rewards", at::tensor(rewards, at::kDouble));
  output.insert("terminated", flags_tensor(terminated));
  output.insert("truncated", flags_tensor(truncated));
  return output;
}

// Reset mode's bound on "resets": enough for moment tests, small enough that a typo cannot
// build millions of environments.
constexpr int64_t kMaxResets = 100000;

// Reset mode: {"observations": float32 [resets, obs]}, the first observations of `resets`
// environments reset as an actor resets them (VectorEnv: episode 0 of environment i gets a
// seed derived from (seed, i)), so tests can compare kvrl's own initial-state distribution
// with a reference's.
c10::impl::GenericDict draw_resets(const c10::impl::GenericDict& input) {
  for (const auto& entry : input) {
    const std::string key = entry.key().isString() ? entry.key().toStringRef() : "<not a string>";
    const bool allowed = key == "name" || key == "plugin" || key == "options" || key == "observe" ||
                         key == "resets" || key == "seed" || key == "gym_setup" || key == "gym_wrappers";
    if (!allowed) {
      throw MalformedInputError(
          "input['" + key +
          "'] is not allowed with input['resets'] (which draws initial observations from kvrl's own reset; "
          "allowed: name, plugin, options, observe, resets, seed, gym_setup, gym_wrappers): drop '" +
          key + "', or drop 'resets' to roll out from a state");
    }
  }
  const c10::IValue& resets = input.at("resets");
  if (!resets.isInt() || resets.toInt() < 1 || resets.toInt() > kMaxResets) {
    throw MalformedInputError("input['resets'] must be an int in [1, " + std::to_string(kMaxResets) +
                              "] (how many initial observations to draw), got " +
                              (resets.isInt() ? std::to_string(resets.toInt()) : "a " + resets.tagKind()));
  }
  std::vector<std::unique_ptr<Environment>> envs;
  envs.reserve(static_cast<size_t>(resets.toInt()));
  for (int64_t i = 0; i < resets.toInt(); ++i) envs.push_back(environment_from(input));
  NativeVectorEnv vector_env(std::move(envs), static_cast<uint64_t>(seed_from(input)));
  vector_env.reset();
  c10::impl::GenericDict output(c10::StringType::get(), c10::AnyType::get());
  output.insert(
      "observations",
      floats_to_tensor(vector_env.observations()).view({resets.toInt(), vector_env.observation_size()}));
  return output;
}

}  // namespace

void run_env_rollout(const std::string& in_path, const std::string& out_path) {
  const c10::IValue root = read_torch_file(in_path);
  if (!root.isGenericDict()) throw MalformedInputError("'" + in_path + "' must hold a dict");
  const auto input = root.toGenericDict();
  if (input.contains("resets")) {
    write_torch_file(out_path, draw_resets(input));
    return;
  }
  const std::unique_ptr<Environment> env = environment_from(input);
  const RolloutRequest request = request_from(input, env->action_space().flat_size());
  write_torch_file(out_path, roll_out(*env, request));
}

}  // namespace kvrl
