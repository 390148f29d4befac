#include "actor/gym_bridge.h"

#include <dlfcn.h>

#include <cstdlib>

#include "common/support/errors.h"

namespace kvrl {
namespace {

// Where the build put the module; KVRL_GYM_BRIDGE overrides it (an installed kvrl, say).
std::string module_path() {
  if (const char* path = std::getenv("KVRL_GYM_BRIDGE"); path != nullptr && *path != '\0') return path;
  return KVRL_GYM_BRIDGE_MODULE;
}

// The module's entry points, loaded once per process and never unloaded: the Python
// interpreter it starts lives as long as the process.
const GymBridgeInfo& bridge(const std::string& name) {
  static const GymBridgeInfo* info = nullptr;
  if (info != nullptr) return *info;
  const std::string path = module_path();
  if (path.empty()) {
    throw InvalidArgumentError(
        name +
        ": gym: environments need the Gymnasium bridge, which this build did not include "
        "(CMake found no Python 3 embedding library or pybind11): run scripts/setup.sh, "
        "which installs them, then reconfigure and rebuild");
  }
  // RTLD_GLOBAL: Python's extension modules (NumPy's) expect the interpreter's symbols
  // to be global, as they are in the python executable.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    throw InvalidArgumentError(name + ": cannot load the Gymnasium bridge '" + path + "': " + dlerror() +
                               " (KVRL_GYM_BRIDGE names another copy)");
  }
  using EntryPoint = const GymBridgeInfo* (*)();
  auto entry = reinterpret_cast<EntryPoint>(dlsym(handle, "kvrl_gym_bridge_v1"));
  const GymBridgeInfo* loaded = entry != nullptr ? entry() : nullptr;
  if (loaded == nullptr || loaded->abi_version != kGymBridgeAbiVersion) {
    throw InvalidArgumentError(name + ": '" + path + "' is not a Gymnasium bridge of this kvrl (ABI " +
                               std::to_string(kGymBridgeAbiVersion) + "): rebuild it with this kvrl");
  }
  info = loaded;
  return *info;
}

std::string gym_id(const std::string& name) {
  std::string id = name.substr(std::string(kGymPrefix).size());
  if (id.empty())
    throw InvalidArgumentError("env.name '" + name +
                               "' names no Gymnasium id (gym:<id>, e.g. gym:CartPole-v1)");
  return id;
}

}  // namespace

std::unique_ptr<Environment> make_gym_environment(const std::string& name, const GymRequest& request) {
  return std::unique_ptr<Environment>(bridge(name).make_environment(gym_id(name), request));
}

std::unique_ptr<VectorEnv> make_gym_vector_env(const std::string& name, const GymRequest& request,
                                               int64_t num_envs, uint64_t seed) {
  return std::unique_ptr<VectorEnv>(bridge(name).make_vector_env(gym_id(name), request, num_envs, seed));
}

}  // namespace kvrl
