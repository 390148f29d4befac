// Environments by name, for configs (`env.name: CartPole-v1`, plus per-env options), and
// from user plugins: shared libraries loaded by path (see env_plugin.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actor/environment.h"
#include "actor/gym_bridge.h"
#include "actor/mujoco_locomotion.h"
#include "actor/vector_env.h"

namespace kvrl {

// Everything that picks and shapes an environment (the env.* keys but num_envs).
struct EnvironmentRequest {
  std::string name;               // a built-in environment
  std::string plugin;             // or a plugin shared library's path; replaces name
  EnvOptions options;             // the environment's own options, and max_episode_steps
  LocomotionSettings locomotion;  // MuJoCo environments: the observed part, the model folder
  GymRequest gym;                 // gym:<id>: gymnasium.make's keyword arguments, setup and wrappers
  NativeStepping stepping;        // how a native vector env steps (gym:<id> refuses all but the default)
};

// Makes the environment a request names. Throws InvalidArgumentError as the functions
// below do, and for an observed part that the environment does not have.
std::unique_ptr<Environment> make_environment(const EnvironmentRequest& request);

// `num_envs` of them stepped together: Gymnasium's vector environment for gym:<id>, a
// NativeVectorEnv otherwise.
std::unique_ptr<VectorEnv> make_vector_env(const EnvironmentRequest& request, int64_t num_envs,
                                           uint64_t seed);

// The built-in names, sorted (the MuJoCo ones included, with or without MuJoCo).
std::vector<std::string> builtin_environment_names();

// Makes a built-in environment. Throws InvalidArgumentError naming the bad name (and the
// names allowed) or the bad option (and the options that environment takes).
std::unique_ptr<Environment> make_environment(const std::string& name, const EnvOptions& options);

// Loads the plugin at `path` (once per process) and makes its environment. Throws
// InvalidArgumentError when the file cannot be loaded, lacks the entry point, or was
// built for another plugin ABI version.
std::unique_ptr<Environment> make_plugin_environment(const std::string& path, const EnvOptions& options);

}  // namespace kvrl
