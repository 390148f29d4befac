#include "launch/eval_command.h"

#include <ATen/Parallel.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "actor/gym_bridge.h"
#include "actor/policy_fit.h"
#include "actor/vector_env.h"
#include "common/io/state_dict_io.h"
#include "common/io/torch_file.h"
#include "common/support/errors.h"
#include "launch/command_line.h"
#include "launch/run_setup.h"
#include "learner/checkpoint.h"

namespace kvrl {
namespace {

// The checkpoint's policy, built from its own config and loaded.
struct SavedPolicy {
  TrainConfig config;
  std::shared_ptr<ActorCritic> model;
};

SavedPolicy load_policy(const std::string& checkpoint) {
  SavedPolicy saved;
  saved.config = TrainConfig::parse(read_checkpoint_config(checkpoint), {});
  const std::unique_ptr<Environment> env = make_configured_env(saved.config);
  saved.model = std::make_shared<ActorCritic>(model_options(saved.config, *env));
  load_checkpoint_model(checkpoint, *saved.model);
  saved.model->eval();
  return saved;
}

// Plays one episode in each of `env`'s environments with the policy; returns and lengths,
// and every step of each episode as the policy saw and took it.
struct PlayedEpisodes {
  std::vector<double> returns;
  std::vector<int64_t> lengths;
  std::vector<std::vector<float>> observations, actions;  // per episode, [T * size]
  std::vector<std::vector<uint8_t>> context_starts;       // per episode, [T]
  std::vector<std::vector<double>> rewards;               // per episode, [T]
};

// Adds step i's reward and length; with `trace`, also what the policy saw and took.
void record_step(PlayedEpisodes& played, int64_t i, const VectorEnv& env, const float* observation,
                 const float* action, bool context_start, bool trace) {
  played.returns[i] += env.rewards()[i];
  ++played.lengths[i];
  if (!trace) return;
  played.observations[i].insert(played.observations[i].end(), observation,
                                observation + env.observation_size());
  played.actions[i].insert(played.actions[i].end(), action, action + env.action_size());
  played.context_starts[i].push_back(context_start ? 1 : 0);
  played.rewards[i].push_back(env.rewards()[i]);
}

// `segment_steps`: a context restarts after this many steps, as the actors' did (0: never).
// `trace`: keep every step (kvrl eval --trace); otherwise only returns and lengths.
PlayedEpisodes play(ActorCritic& policy, VectorEnv& env, uint64_t seed, bool greedy, int64_t segment_steps,
                    bool trace) {
  const int64_t episodes = env.num_envs();
  at::Generator generator = at::detail::createCPUGenerator(seed);
  torch::NoGradGuard no_grad;
  env.reset();
  PlayedEpisodes played{
      std::vector<double>(episodes, 0.0),          std::vector<int64_t>(episodes, 0),
      std::vector<std::vector<float>>(episodes),   std::vector<std::vector<float>>(episodes),
      std::vector<std::vector<uint8_t>>(episodes), std::vector<std::vector<double>>(episodes)};
  std::vector<bool> done(episodes, false);
  int64_t remaining = episodes;
  std::vector<float> actions(episodes * env.action_size());
  std::vector<int64_t> context_steps(episodes, 0);
  while (remaining > 0) {
    const at::Tensor observations = at::from_blob(const_cast<float*>(env.observations().data()),
                                                  {episodes, env.observation_size()}, at::kFloat);
    std::vector<uint8_t> init(env.is_init().begin(), env.is_init().end());
    for (int64_t i = 0; i < episodes; ++i) {
      if (segment_steps > 0 && context_steps[i] >= segment_steps) init[i] = 1;
      context_steps[i] = init[i] ? 1 : context_steps[i] + 1;
    }
    const at::Tensor is_init = at::from_blob(init.data(), {episodes}, at::kBool);
    const PolicyStep step = policy.act(observations, is_init, generator, greedy);
    std::memcpy(actions.data(), step.actions.contiguous().data_ptr<float>(), actions.size() * sizeof(float));
    std::vector<float> seen;
    if (trace) seen = env.observations();  // the step below overwrites them
    env.step(actions);
    for (int64_t i = 0; i < episodes; ++i) {
      if (done[i]) continue;
      record_step(played, i, env, seen.data() + i * env.observation_size(),
                  actions.data() + i * env.action_size(), init[i] != 0, trace);
      if (env.terminated()[i] || env.truncated()[i]) {
        done[i] = true;
        --remaining;
      }
    }
  }
  return played;
}

// {"episodes": [{observations [T, O], actions [T, A], rewards [T] float64, context_starts [T] bool}]}
void write_trace(const std::string& path, const PlayedEpisodes& played, int64_t observation_size,
                 int64_t action_size) {
  c10::impl::GenericList episodes(c10::AnyType::get());
  for (size_t i = 0; i < played.lengths.size(); ++i) {
    const int64_t steps = played.lengths[i];
    c10::impl::GenericDict episode(c10::StringType::get(), c10::AnyType::get());
    auto floats = [](const std::vector<float>& values, int64_t rows, int64_t columns) {
      return at::from_blob(const_cast<float*>(values.data()), {rows, columns}, at::kFloat).clone();
    };
    episode.insert("observations", floats(played.observations[i], steps, observation_size));
    episode.insert("actions", floats(played.actions[i], steps, action_size));
    episode.insert("rewards", at::tensor(played.rewards[i], at::kDouble));
    std::vector<uint8_t> starts = played.context_starts[i];
    episode.insert("context_starts", at::from_blob(starts.data(), {steps}, at::kBool).clone());
    episodes.push_back(episode);
  }
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert("episodes", episodes);
  write_torch_file(path, root);
}

using Dict = c10::impl::GenericDict;
Dict string_dict() { return Dict(c10::StringType::get(), c10::AnyType::get()); }

// The image encoder as a Python user rebuilds it: per layer Conv2d(in, channels, kernel,
// stride) and ReLU over the image permuted to [N, C, H, W] and multiplied by input_scale,
// then Linear and ReLU ("state_dict" uses torch.nn.Sequential's and Linear's names).
Dict exported_image_encoder(ActorCritic& model) {
  const ImageEncoderOptions& options = *model.options().image_encoder;
  Dict encoder = string_dict();
  Dict weights = string_dict();
  for (const auto& item : state_dict_of(*model.named_children()["encoder"]))
    weights.insert(item.key(), item.value());
  encoder.insert("state_dict", weights);
  encoder.insert("image_shape", c10::List<int64_t>(options.image_shape));
  encoder.insert("layers", conv_layers_text(options.layers));
  encoder.insert("features", options.features);
  encoder.insert("input_scale", options.input_scale);
  return encoder;
}

}  // namespace

int run_eval(const EvalArguments& arguments) {
  const int64_t episodes = parse_count("--episodes", arguments.episodes, 1, 10000);
  const int64_t seed = parse_count("--seed", arguments.seed, 0, int64_t{1} << 62);
  const std::string& env_name = arguments.env_name;
  const bool greedy = arguments.greedy;
  at::set_num_threads(1);
  SavedPolicy saved = load_policy(arguments.checkpoint);
  TrainConfig env_config = saved.config;
  if (!env_name.empty()) {
    env_config.env_name = env_name;
    env_config.env_plugin.clear();
  }
  if (!arguments.max_steps.empty()) {
    // The time limit the way each kind of environment takes it.
    const int64_t limit = parse_count("--max-steps", arguments.max_steps, 1, int64_t{1} << 40);
    if (env_config.env_plugin.empty() && is_gym_environment(env_config.env_name)) {
      env_config.env_kwargs["max_episode_steps"] = std::to_string(limit);
    } else {
      env_config.env_options["max_episode_steps"] = static_cast<double>(limit);
    }
  }
  const std::unique_ptr<Environment> checked = make_configured_env(env_config);
  const Environment& prototype = *checked;
  const ActorCriticOptions& policy = saved.model->options();
  check_policy_fits({saved.model->observation_size(), policy.discrete, policy.num_outputs},
                    prototype.observation_space(), prototype.action_space());
  const int64_t time_limit = prototype.episode_step_limit();
  if (time_limit <= 0) {
    throw InvalidArgumentError(prototype.name() +
                               " has no time limit, so an evaluation episode might never end: give it one "
                               "with --max-steps N");
  }
  const std::string name = prototype.name();
  const std::unique_ptr<VectorEnv> vector =
      make_configured_vector_env(env_config, episodes, static_cast<uint64_t>(seed));
  VectorEnv& env = *vector;
  const PlayedEpisodes played = play(*saved.model, env, static_cast<uint64_t>(seed), greedy,
                                     context_plan(saved.config).segment_steps, !arguments.trace_path.empty());
  if (!arguments.trace_path.empty()) {
    write_trace(arguments.trace_path, played, env.observation_size(), env.action_size());
  }
  const std::vector<double>& returns = played.returns;
  const std::vector<int64_t>& lengths = played.lengths;
  double mean = 0, variance = 0;
  for (double r : returns) mean += r / static_cast<double>(episodes);
  for (double r : returns) variance += (r - mean) * (r - mean) / static_cast<double>(episodes);
  std::printf("kvrl eval: %s on %s, %lld episodes, seed %lld, %s actions\n", arguments.checkpoint.c_str(),
              name.c_str(), static_cast<long long>(episodes), static_cast<long long>(seed),
              greedy ? "greedy" : "sampled");
  std::printf("return: mean %.3f std %.3f\nlengths:", mean, std::sqrt(variance));
  for (int64_t length : lengths) std::printf(" %lld", static_cast<long long>(length));
  std::printf("\n");
  return 0;
}

void run_export(const std::string& checkpoint, const std::string& out_path) {
  SavedPolicy saved = load_policy(checkpoint);
  if (saved.config.positions != "learned") {
    throw InvalidArgumentError(
        "kvrl export writes a policy for TorchRL's TransformerModule, whose positions are a "
        "learned table; this checkpoint's model.positions is " +
        saved.config.positions + " (model.context " + saved.config.context +
        "), which the reference cannot load");
  }
  const ActorCriticOptions& options = saved.model->options();
  const auto dict = string_dict;
  Dict root = dict();
  Dict transformer = dict();
  for (const auto& item : state_dict_of(saved.model->trunk())) transformer.insert(item.key(), item.value());
  root.insert("transformer", transformer);
  Dict config = dict();
  config.insert("input_size", *options.transformer.input_size);
  config.insert("hidden_size", *options.transformer.hidden_size);
  config.insert("num_layers", options.transformer.num_layers);
  config.insert("num_heads", *options.transformer.num_heads);
  config.insert("max_seq_len", *options.transformer.max_seq_len);
  config.insert("dim_feedforward",
                options.transformer.dim_feedforward.value_or(4 * *options.transformer.hidden_size));
  root.insert("config", config);
  // The MLP critic is a torch.nn.Sequential(Linear, Tanh, Linear, Tanh, Linear) state dict.
  const char* critic = options.critic == CriticKind::kMlp ? "critic" : "value_head";
  for (const char* head : {"policy_head", critic}) {
    Dict weights = dict();
    for (const auto& item : state_dict_of(*saved.model->named_children()[head]))
      weights.insert(item.key(), item.value());
    root.insert(head, weights);
  }
  if (!options.discrete) root.insert("log_std", saved.model->named_parameters(/*recurse=*/false)["log_std"]);
  if (options.image_encoder) root.insert("encoder", exported_image_encoder(*saved.model));
  if (options.normalize_observations) {
    // The policy sees clamp((x - mean) / sqrt(var + epsilon), -clip, clip).
    const RunningMoments& moments = saved.model->observation_moments();
    Dict normalization = dict();
    normalization.insert("mean", moments.mean.detach().clone());
    normalization.insert("var", moments.var.detach().clone());
    normalization.insert("epsilon", kMomentsEpsilon);
    normalization.insert("clip", options.observation_clip);
    root.insert("observation_norm", normalization);
  }
  Dict policy = dict();
  policy.insert("discrete", options.discrete);
  policy.insert("num_outputs", options.num_outputs);
  policy.insert("temporal_context", options.temporal_context);
  policy.insert("critic", std::string(options.critic == CriticKind::kMlp ? "mlp" : "trunk"));
  policy.insert("env", saved.config.env_plugin.empty() ? saved.config.env_name : saved.config.env_plugin);
  root.insert("policy", policy);
  write_torch_file(out_path, root);
  std::printf("kvrl export: wrote %s (TransformerModule state dict, config and heads)\n", out_path.c_str());
}

}  // namespace kvrl
