#include "launch/run_setup.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include "actor/env_registry.h"
#include "actor/policy_fit.h"
#include "common/support/errors.h"
#include "common/support/logger.h"

namespace kvrl {

ContextPlan context_plan(const TrainConfig& config) {
  ContextPlan plan;
  if (config.context == "sliding") {
    plan.attention_window = config.attention_window > 0 ? config.attention_window : config.max_seq_len;
    plan.reach = config.num_layers * (plan.attention_window - 1);
  } else {
    // One slot stays free for the bootstrap token that follows a segment's last step.
    plan.segment_steps = config.max_seq_len - 1;
    plan.reach = plan.segment_steps - 1;
  }
  if (!config.temporal_context) plan.reach = 0;  // every step is its own context
  return plan;
}

EnvironmentRequest environment_request(const TrainConfig& config) {
  const ObservedPart observe = config.env_observe == "positions"    ? ObservedPart::kPositions
                               : config.env_observe == "velocities" ? ObservedPart::kVelocities
                                                                    : ObservedPart::kAll;
  return EnvironmentRequest{.name = config.env_name,
                            .plugin = config.env_plugin,
                            .options = config.env_options,
                            .locomotion = {.observe = observe, .model_dir = config.mujoco_model_dir},
                            .gym = {.kwargs = config.env_kwargs,
                                    .setup = TrainConfig::comma_separated(config.env_gym_setup),
                                    .wrappers = TrainConfig::comma_separated(config.env_gym_wrappers)},
                            .stepping = {}};  // set per vector env: it depends on how many
}

std::unique_ptr<Environment> make_configured_env(const TrainConfig& config) {
  return make_environment(environment_request(config));
}

namespace {

// env.stepping and the rest for `num_envs` environments: delays spread evenly from
// env.step_delay_ms to env.step_delay_spread times as long.
NativeStepping native_stepping(const TrainConfig& config, int64_t num_envs) {
  NativeStepping stepping;
  stepping.asynchronous = config.env_stepping == "async";
  stepping.threads = config.env_step_threads > 0 ? config.env_step_threads
                     : stepping.asynchronous     ? num_envs
                                                 : 0;
  stepping.min_ready = std::min(config.env_min_ready, num_envs);
  if (config.env_step_delay_ms > 0) {
    const double first = config.env_step_delay_ms / 1000;
    const double last = first * config.env_step_delay_spread;
    for (int64_t i = 0; i < num_envs; ++i) {
      stepping.step_delays_s.push_back(num_envs == 1 ? first : first + (last - first) * i / (num_envs - 1));
    }
  }
  return stepping;
}

}  // namespace

std::unique_ptr<VectorEnv> make_configured_vector_env(const TrainConfig& config, int64_t num_envs,
                                                      uint64_t seed) {
  EnvironmentRequest request = environment_request(config);
  request.stepping = native_stepping(config, num_envs);
  return make_vector_env(request, num_envs, seed);
}

namespace {

// The image encoder for model.encoder = cnn, shaped by the observation space.
ImageEncoderOptions image_encoder_options(const TrainConfig& config, const Space& observations) {
  std::vector<int64_t> shape = observations.shape;
  if (!observations.is_discrete() && shape.size() == 2) shape.push_back(1);  // [H, W]: one channel
  if (observations.is_discrete() || shape.size() != 3) {
    throw InvalidArgumentError(
        "config: model.encoder = cnn needs image observations, a box of shape [H, W, C] "
        "or [H, W]; " +
        config.env_name + " observes " + observations.describe() + ": use model.encoder = mlp");
  }
  ImageEncoderOptions options;
  options.image_shape = shape;
  options.layers = parse_conv_layers(config.cnn_layers);
  options.features = config.cnn_features;
  options.input_scale = config.cnn_input_scale;
  if (options.input_scale == 0) {
    const float largest = *std::max_element(observations.high.begin(), observations.high.end());
    const bool bytes = observations.element == ObservationElement::kUInt8 && largest > 0;
    options.input_scale = bytes ? 1.0 / largest : 1.0;
  }
  return options;
}

}  // namespace

ActorCriticOptions model_options(const TrainConfig& config, const Environment& env) {
  ActorCriticOptions options;
  options.transformer.input_size = env.observation_space().flat_size();
  if (config.encoder == "cnn") {
    options.image_encoder = image_encoder_options(config, env.observation_space());
    options.transformer.input_size = config.cnn_features;
  }
  options.transformer.hidden_size = config.hidden_size;
  options.transformer.num_layers = config.num_layers;
  options.transformer.num_heads = config.num_heads;
  options.transformer.max_seq_len = config.max_seq_len;
  if (config.dim_feedforward > 0) options.transformer.dim_feedforward = config.dim_feedforward;
  options.transformer.positions =
      config.positions == "rotary" ? PositionEncoding::kRotary : PositionEncoding::kLearned;
  options.transformer.attention_window = context_plan(config).attention_window;
  options.transformer.tiled_attention = config.learner_window_attention == "episodes";
  const PolicyShape shape = policy_shape_for(env.observation_space(), env.action_space());
  options.discrete = shape.discrete;
  options.num_outputs = shape.num_outputs;
  options.temporal_context = config.temporal_context;
  options.critic = config.critic == "mlp" ? CriticKind::kMlp : CriticKind::kTrunk;
  options.critic_hidden_size = config.critic_hidden_size;
  options.normalize_observations = config.normalize_observations;
  options.observation_clip = config.observation_clip;
  options.normalize_rewards = config.normalize_rewards;
  options.transformer.cuda_graphs = config.cuda_graphs;
  check_policy_fits({env.observation_space().flat_size(), options.discrete, options.num_outputs},
                    env.observation_space(), env.action_space());
  return options;
}

TrainingSetup prepare_training(const std::string& config_path, const std::vector<std::string>& overrides) {
  TrainingSetup setup;
  setup.config = TrainConfig::load(config_path, overrides);
  setup.prototype = make_configured_env(setup.config);
  const int64_t time_limit = setup.prototype->episode_step_limit();
  const int64_t fragment_steps = setup.config.fragment_steps;
  if (time_limit <= 0 && fragment_steps == 0) {
    throw InvalidArgumentError(setup.prototype->name() +
                               " has no time limit, so whole episodes could grow without bound: set "
                               "actor.fragment_steps (e.g. 64) to ship fragments");
  }
  setup.model = model_options(setup.config, *setup.prototype);
  const ContextPlan plan = context_plan(setup.config);
  setup.spec.observation_size = setup.prototype->observation_space().flat_size();
  setup.spec.observation_element = setup.prototype->observation_space().element;
  setup.spec.action_size = setup.prototype->action_space().flat_size();
  setup.spec.max_length = fragment_steps == 0 ? time_limit
                          : time_limit > 0    ? std::min(fragment_steps, time_limit)
                                              : fragment_steps;
  setup.spec.max_context = plan.reach;
  setup.spec.streams = setup.config.num_envs;
  setup.spec.segment_steps = plan.segment_steps;
  setup.spec.whole_episodes = fragment_steps == 0 && setup.config.collect == "episodes";
  return setup;
}

std::shared_ptr<ActorCritic> make_policy(TrainingSetup& setup, bool learner, c10::Device device,
                                         const std::shared_ptr<Logger>& logger) {
  setup.model.transformer.warn = [logger](const std::string& message) { logger->warn(message); };
  auto model = std::make_shared<ActorCritic>(setup.model);
  model->to(device);
  if ((learner ? setup.config.learner_autocast : setup.config.actor_autocast) == "bfloat16") {
    model->set_autocast(at::kBFloat16);
    logger->info(cat(learner ? "the window forward runs" : "steps and caches run",
                     " under bfloat16 autocast on ", device.str()));
  }
  return model;
}

std::string read_token_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgumentError("remote.token_file: cannot read '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  if (token.empty()) throw InvalidArgumentError("remote.token_file: '" + path + "' holds no token");
  return token;
}

size_t remote_frame_limit(const EpisodeSpec& spec, const std::vector<at::Tensor>& parameters) {
  int64_t parameter_count = 0;
  for (const at::Tensor& p : parameters) parameter_count += p.numel();
  const int64_t step_bytes =
      spec.observation_size * static_cast<int64_t>(element_bytes(spec.observation_element)) +
      4 * spec.action_size + 64;
  const int64_t episode_bytes = (spec.max_length + spec.max_context + 1) * step_bytes + 4096;
  const int64_t weight_bytes = 4 * parameter_count + 4096;
  return static_cast<size_t>(2 * std::max(episode_bytes, weight_bytes));
}

}  // namespace kvrl
