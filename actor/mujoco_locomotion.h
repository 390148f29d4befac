// Gymnasium's MuJoCo locomotion tasks (v5) in C++ on the MuJoCo C API: Hopper-v5,
// HalfCheetah-v5, Walker2d-v5 and Ant-v5, with v5's default observation, reward terms,
// termination, frame skip, reset noise and 1000-step time limit. The physics is MuJoCo's
// own (the same library the Python bindings wrap), stepped as Gymnasium steps it, so from
// the same state and actions both give the same episode. Reset noise comes from our own
// RNG: episodes match Gymnasium's from the same state, the reset distribution from any seed.
// Model XML files are read from the installed Gymnasium package, never copied.
//
// Built only where the MuJoCo C library was found (cmake/FindMuJoCo.cmake); elsewhere the
// names are still known and asking for one says how to get MuJoCo.
#pragma once

#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <string_view>

#include "actor/environment.h"

namespace kvrl {

inline constexpr std::array<std::string_view, 4> kMujocoEnvironmentNames = {"Ant-v5", "HalfCheetah-v5",
                                                                            "Hopper-v5", "Walker2d-v5"};

inline bool is_mujoco_environment(const std::string& name) {
  return std::find(kMujocoEnvironmentNames.begin(), kMujocoEnvironmentNames.end(), name) !=
         kMujocoEnvironmentNames.end();
}

// The part of a locomotion observation the policy sees: all of it (Gymnasium's), or the
// partially observed variants of the recurrent-RL literature: joint positions only (the
// observed qpos) or velocities only (the observed qvel). Ant's contact forces go with all.
enum class ObservedPart { kAll, kPositions, kVelocities };

struct LocomotionSettings {
  ObservedPart observe = ObservedPart::kAll;
  std::string model_dir;  // folder of Gymnasium's model XML files; empty: the one found at set-up
};

// Whether this build has the MuJoCo C library.
bool mujoco_available();
// The MuJoCo library's version ("4.0.1"), or "" without it.
std::string mujoco_version();
// The model folder found at set-up (KVRL_MUJOCO_MODEL_DIR), or "".
std::string default_mujoco_model_dir();

// The task's options, named after Gymnasium's keyword arguments, with v5's defaults.
// Throws InvalidArgumentError for an unknown name, or saying how to get MuJoCo without it.
EnvOptions mujoco_environment_defaults(const std::string& name);

// `options` hold every option of mujoco_environment_defaults(name). Throws
// InvalidArgumentError for a bad option value or a model file that cannot be loaded.
std::unique_ptr<Environment> make_mujoco_environment(const std::string& name, const EnvOptions& options,
                                                     const LocomotionSettings& settings);

}  // namespace kvrl
