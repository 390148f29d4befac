#include "actor/env_registry.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>

#include "actor/classic_control.h"
#include "actor/env_plugin.h"
#include "actor/memory_tasks.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

struct BuiltinEnvironment {
  EnvOptions defaults;  // every option the environment takes, with its default
  std::function<std::unique_ptr<Environment>(const EnvOptions&)> make;
};

int64_t integer_option(const std::string& env, const EnvOptions& options, const std::string& key) {
  const double value = options.at(key);
  if (value != std::floor(value)) {
    throw InvalidArgumentError(env + ": option " + key + " (" + std::to_string(value) +
                               ") must be an integer");
  }
  return static_cast<int64_t>(value);
}

const std::map<std::string, BuiltinEnvironment>& builtins() {
  static const std::map<std::string, BuiltinEnvironment> table{
      {"CartPole-v1", {{}, [](const EnvOptions&) { return std::make_unique<CartPole>(); }}},
      {"Pendulum-v1", {{}, [](const EnvOptions&) { return std::make_unique<Pendulum>(); }}},
      {"Acrobot-v1", {{}, [](const EnvOptions&) { return std::make_unique<Acrobot>(); }}},
      {"MountainCar-v0", {{}, [](const EnvOptions&) { return std::make_unique<MountainCar>(); }}},
      {"StatelessCartPole", {{}, [](const EnvOptions&) { return std::make_unique<StatelessCartPole>(); }}},
      {"RepeatPrevious",
       {{{"num_decks", 1}, {"k", 4}},
        [](const EnvOptions& o) {
          return std::make_unique<RepeatPrevious>(integer_option("RepeatPrevious", o, "num_decks"),
                                                  integer_option("RepeatPrevious", o, "k"));
        }}},
      {"CueRecallTMaze",
       {{{"corridor_length", 10}},
        [](const EnvOptions& o) {
          return std::make_unique<CueRecallTMaze>(integer_option("CueRecallTMaze", o, "corridor_length"));
        }}},
  };
  return table;
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

// Owns the plugin's library for as long as its environment lives, and forwards to it.
class PluginEnvironment : public Environment {
 public:
  PluginEnvironment(std::shared_ptr<void> library, std::unique_ptr<Environment> inner)
      : library_(std::move(library)), inner_(std::move(inner)) {}
  ~PluginEnvironment() override { inner_.reset(); }  // before the library goes

  std::string name() const override { return inner_->name(); }
  const Space& observation_space() const override { return inner_->observation_space(); }
  const Space& action_space() const override { return inner_->action_space(); }
  int64_t time_limit() const override { return inner_->time_limit(); }
  void set_state(std::span<const double> state, std::span<float> observation) override {
    inner_->set_state(state, observation);
  }

 protected:
  void reset_dynamics(uint64_t seed, std::span<float> observation) override {
    inner_->reset(seed, observation);
  }
  StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override {
    return inner_->step(action, observation);
  }

 private:
  std::shared_ptr<void> library_;
  std::unique_ptr<Environment> inner_;
};

// The option every environment takes, as Gymnasium's TimeLimit wrapper does.
constexpr const char* kStepLimitOption = "max_episode_steps";

// Takes max_episode_steps out of `options` (it is not the environment's own option).
std::optional<int64_t> take_step_limit(const std::string& env, EnvOptions& options) {
  const auto it = options.find(kStepLimitOption);
  if (it == options.end()) return std::nullopt;
  const int64_t steps = integer_option(env, options, kStepLimitOption);
  options.erase(it);
  return steps;
}

std::unique_ptr<Environment> with_step_limit(std::unique_ptr<Environment> env, std::optional<int64_t> steps) {
  if (steps) env->override_step_limit(*steps);
  return env;
}

// `given` over the environment's `defaults`; an option it does not take is refused by name.
EnvOptions resolve_options(const std::string& env, const EnvOptions& defaults, const EnvOptions& given) {
  EnvOptions resolved = defaults;
  for (const auto& [key, value] : given) {
    if (!resolved.count(key)) {
      std::vector<std::string> allowed;
      for (const auto& [option, _] : defaults) allowed.push_back(option);
      allowed.emplace_back(kStepLimitOption);
      throw InvalidArgumentError(env + " has no option '" + key + "' (options: " + join(allowed) + ")");
    }
    resolved[key] = value;
  }
  return resolved;
}

std::vector<std::string> mujoco_names() {
  return {kMujocoEnvironmentNames.begin(), kMujocoEnvironmentNames.end()};
}

}  // namespace

std::vector<std::string> builtin_environment_names() {
  std::vector<std::string> names = mujoco_names();
  for (const auto& [name, _] : builtins()) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<Environment> make_environment(const std::string& name, const EnvOptions& given) {
  EnvironmentRequest request;
  request.name = name;
  request.options = given;
  return make_environment(request);
}

// What only the native environments take: refused for a gym: id, naming its own way.
void check_gym_request(const EnvironmentRequest& request) {
  if (!request.options.empty()) {
    throw InvalidArgumentError(
        "env.options." + request.options.begin()->first + ": " + request.name +
        " takes gymnasium.make's keyword arguments as env.kwargs.<name> (max_episode_steps "
        "among them), not env.options");
  }
  if (request.locomotion.observe != ObservedPart::kAll) {
    throw InvalidArgumentError("env.observe: " + request.name +
                               " observes all of its observation, so env.observe "
                               "must stay all");
  }
}

std::unique_ptr<Environment> make_environment(const EnvironmentRequest& request) {
  if (request.plugin.empty() && is_gym_environment(request.name)) {
    check_gym_request(request);
    return make_gym_environment(request.name, request.gym);
  }
  const std::string native = request.plugin.empty() ? request.name : request.plugin;
  if (!request.gym.kwargs.empty()) {
    throw InvalidArgumentError("env.kwargs." + request.gym.kwargs.begin()->first +
                               ": keyword arguments apply to gym:<id> environments only, not to " + native);
  }
  if (!request.gym.setup.empty() || !request.gym.wrappers.empty()) {
    throw InvalidArgumentError(std::string(request.gym.setup.empty() ? "env.gym_wrappers" : "env.gym_setup") +
                               ": Python callables apply to gym:<id> environments only, not to " + native);
  }
  if (!request.plugin.empty() || !is_mujoco_environment(request.name)) {
    if (request.locomotion.observe != ObservedPart::kAll) {
      throw InvalidArgumentError("env.observe: " + native +
                                 " observes all of its observation; positions and velocities apply to the "
                                 "MuJoCo environments (" +
                                 join(mujoco_names()) + ")");
    }
  }
  if (!request.plugin.empty()) return make_plugin_environment(request.plugin, request.options);
  EnvOptions options = request.options;
  const std::optional<int64_t> step_limit = take_step_limit(request.name, options);
  if (is_mujoco_environment(request.name)) {
    const EnvOptions resolved =
        resolve_options(request.name, mujoco_environment_defaults(request.name), options);
    return with_step_limit(make_mujoco_environment(request.name, resolved, request.locomotion), step_limit);
  }
  auto it = builtins().find(request.name);
  if (it == builtins().end()) {
    throw InvalidArgumentError("unknown environment '" + request.name + "' (built in: " +
                               join(builtin_environment_names()) + "; or load your own with env.plugin)");
  }
  return with_step_limit(it->second.make(resolve_options(request.name, it->second.defaults, options)),
                         step_limit);
}

std::unique_ptr<VectorEnv> make_vector_env(const EnvironmentRequest& request, int64_t num_envs,
                                           uint64_t seed) {
  if (request.plugin.empty() && is_gym_environment(request.name)) {
    check_gym_request(request);
    if (request.stepping.asynchronous || request.stepping.threads > 0 ||
        !request.stepping.step_delays_s.empty()) {
      throw InvalidArgumentError(
          request.name +
          " steps through Gymnasium's vector API, all environments together in its own "
          "loop: asynchronous stepping, step threads and step delays need a native environment");
    }
    return make_gym_vector_env(request.name, request.gym, num_envs, seed);
  }
  std::vector<std::unique_ptr<Environment>> envs;
  for (int64_t i = 0; i < num_envs; ++i) envs.push_back(make_environment(request));
  return std::make_unique<NativeVectorEnv>(std::move(envs), seed, request.stepping);
}

std::unique_ptr<Environment> make_plugin_environment(const std::string& path, const EnvOptions& given) {
  EnvOptions options = given;
  const std::optional<int64_t> step_limit = take_step_limit(path, options);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw InvalidArgumentError("cannot load environment plugin '" + path + "': " + dlerror());
  }
  std::shared_ptr<void> library(handle, [](void* h) { dlclose(h); });
  using EntryPoint = const EnvPluginInfo* (*)();
  auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, KVRL_ENV_PLUGIN_ENTRY_POINT));
  if (entry == nullptr) {
    throw InvalidArgumentError("environment plugin '" + path +
                               "' has no symbol " KVRL_ENV_PLUGIN_ENTRY_POINT
                               ": define it with KVRL_ENV_PLUGIN (actor/env_plugin.h)");
  }
  const EnvPluginInfo* info = entry();
  if (info == nullptr || info->abi_version != kEnvPluginAbiVersion) {
    throw InvalidArgumentError("environment plugin '" + path + "' was built for plugin ABI version " +
                               std::to_string(info ? info->abi_version : -1) + ", this kvrl needs " +
                               std::to_string(kEnvPluginAbiVersion) + ": rebuild it against these headers");
  }
  std::unique_ptr<Environment> inner(info->create(options));
  if (!inner) throw InvalidArgumentError("environment plugin '" + path + "' returned no environment");
  // Both apply it: the plugin's own step truncates as well as the wrapper's.
  inner = with_step_limit(std::move(inner), step_limit);
  return with_step_limit(std::make_unique<PluginEnvironment>(std::move(library), std::move(inner)),
                         step_limit);
}

}  // namespace kvrl
