// The MuJoCo environments of a build without the MuJoCo C library: known by name, and
// asking for one says how to get them.
#include "actor/mujoco_locomotion.h"
#include "common/support/errors.h"

namespace kvrl {

bool mujoco_available() { return false; }

std::string mujoco_version() { return ""; }

std::string default_mujoco_model_dir() { return ""; }

EnvOptions mujoco_environment_defaults(const std::string& name) {
  throw InvalidArgumentError(
      name +
      " needs the MuJoCo C library, which this build did not find: run scripts/setup.sh "
      "(it installs the mujoco-core wheel into ~/.cache/kvrl/venv), then reconfigure and "
      "rebuild (cmake -S . -B build && cmake --build build)");
}

std::unique_ptr<Environment> make_mujoco_environment(const std::string& name, const EnvOptions&,
                                                     const LocomotionSettings&) {
  mujoco_environment_defaults(name);
  return nullptr;
}

}  // namespace kvrl
