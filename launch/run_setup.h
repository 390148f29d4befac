// What `train`, `eval` and `export` build alike from a TrainConfig: the environment and
// the ActorCritic's options.
#pragma once

#include <memory>

#include "actor/environment.h"
#include "common/model/actor_critic.h"
#include "launch/train_config.h"

namespace kvrl {

// The configured environment: a built-in by name, or a plugin.
std::unique_ptr<Environment> make_configured_env(const TrainConfig& config);
// The policy for `env` with the config's model sizes; throws InvalidArgumentError when
// the policy cannot act in the environment.
ActorCriticOptions model_options(const TrainConfig& config, const Environment& env);

}  // namespace kvrl
