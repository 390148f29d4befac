// What `train`, `eval` and `export` build alike from a TrainConfig: the environment and
// the ActorCritic's options.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "actor/environment.h"
#include "actor/vector_env.h"
#include "common/model/actor_critic.h"
#include "common/wire/episode_codec.h"
#include "launch/train_config.h"

namespace kvrl {

class Logger;

// How far a stream's context reaches, as actors keep it and learners rebuild it.
struct ContextPlan {
  int64_t attention_window = 0;  // 0: a step attends to its whole context
  int64_t segment_steps = 0;     // a context restarts after this many steps; 0: never (sliding)
  // The longest context prefix a fragment carries: the steps before a step that can change
  // what the policy computes for it (num_layers * (W - 1) for a sliding window, whose
  // layers each look W - 1 steps further back through the keys of the layer below).
  int64_t reach = 0;
};
ContextPlan context_plan(const TrainConfig& config);

// The configured environment: a built-in by name, or a plugin.
std::unique_ptr<Environment> make_configured_env(const TrainConfig& config);
// `num_envs` of them stepped together (Gymnasium's vector environment for gym:<id>).
std::unique_ptr<VectorEnv> make_configured_vector_env(const TrainConfig& config, int64_t num_envs,
                                                      uint64_t seed);
// The policy for `env` with the config's model sizes; throws InvalidArgumentError when
// the policy cannot act in the environment.
ActorCriticOptions model_options(const TrainConfig& config, const Environment& env);

// What every rank of a run, and a remote actor, builds from the config first: the config,
// one environment to read the spaces from, the policy's options and the episodes' shape.
struct TrainingSetup {
  TrainConfig config;
  std::unique_ptr<Environment> prototype;
  ActorCriticOptions model;
  EpisodeSpec spec;
};
// Reads and validates the config and the environment. Throws InvalidArgumentError naming
// the bad key or value.
TrainingSetup prepare_training(const std::string& config_path, const std::vector<std::string>& overrides);

// The policy on `device`, under bfloat16 autocast where the role's config key says so
// (logged); its faster-path warnings go to `logger`.
std::shared_ptr<ActorCritic> make_policy(TrainingSetup& setup, bool learner, c10::Device device,
                                         const std::shared_ptr<Logger>& logger);

// The shared secret of remote actors from `path`, without trailing whitespace. Throws
// InvalidArgumentError naming the path when it cannot be read or holds no token.
std::string read_token_file(const std::string& path);

// The largest frame a remote actor's connection carries: the weights, or the longest
// episode message `spec` allows, with room to spare.
size_t remote_frame_limit(const EpisodeSpec& spec, const std::vector<at::Tensor>& parameters);

}  // namespace kvrl
