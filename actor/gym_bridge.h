// Any Gymnasium environment by id (`env.name: gym:<id>`, with `env.kwargs` for
// gymnasium.make): the Python environment runs inside the actor's process through an
// embedded CPython, vectorised by Gymnasium's own vector API. The bridge is a module,
// libkvrl_gym_bridge.so (actor/gym/), loaded on first use, so kvrl needs no Python unless
// a gym: environment is asked for. Spaces: Box of any shape (flattened, as float32),
// Discrete and MultiDiscrete (observed one-hot; a MultiDiscrete action is one index over
// the product of its choices); others are refused by name.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actor/environment.h"
#include "actor/vector_env.h"

namespace kvrl {

inline constexpr const char* kGymPrefix = "gym:";

inline bool is_gym_environment(const std::string& name) { return name.rfind(kGymPrefix, 0) == 0; }

// gymnasium.make's keyword arguments as config text (env.kwargs.<name>: value): a value
// that reads as an integer, a float, true/false or null becomes that, anything else a string.
using GymKwargs = std::map<std::string, std::string>;

// How a gym: environment is made: gymnasium.make's keyword arguments, Python callables that
// register the id (a package that registers on request, as MinAtar's minatar.gym:register_envs
// does), and wrappers around each environment (minigrid.wrappers:ImgObsWrapper, say).
// Each callable is "module:attribute", imported by the bridge.
struct GymRequest {
  GymKwargs kwargs;
  std::vector<std::string> setup;     // called once, in order, while the id is not registered
  std::vector<std::string> wrappers;  // applied to each environment in order: Wrapper(env)
};

// One environment (`name`: "gym:<id>"), stepped on its own: for the checks at start, eval
// and env-rollout. Throws InvalidArgumentError when the bridge, Python or Gymnasium is
// missing (saying how to get them), or when Gymnasium refuses the id or a space.
std::unique_ptr<Environment> make_gym_environment(const std::string& name, const GymRequest& request);

// `num_envs` of them through Gymnasium's SyncVectorEnv, resetting in the same step
// (AutoresetMode.SAME_STEP); environment i is first reset with a seed derived from
// (seed, i), later episodes continue its own RNG, as Gymnasium's vector environments do.
std::unique_ptr<VectorEnv> make_gym_vector_env(const std::string& name, const GymRequest& request,
                                               int64_t num_envs, uint64_t seed);

// What the module exports (kvrl_gym_bridge_v1), checked by version before use.
struct GymBridgeInfo {
  int abi_version;
  Environment* (*make_environment)(const std::string& id, const GymRequest& request);
  VectorEnv* (*make_vector_env)(const std::string& id, const GymRequest& request, int64_t num_envs,
                                uint64_t seed);
};
inline constexpr int kGymBridgeAbiVersion = 2;  // 2: GymRequest (setup and wrappers)

}  // namespace kvrl
