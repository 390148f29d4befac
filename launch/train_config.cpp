#include "launch/train_config.h"

#include <arpa/inet.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <limits>
#include <regex>
#include <set>
#include <sstream>

#include "actor/gym_bridge.h"
#include "common/comm/device_placement.h"
#include "common/model/conv_layers.h"
#include "common/support/errors.h"
#include "common/support/number_text.h"
#include "learner/advantage_rules.h"
#include "learner/policy_lag.h"

namespace kvrl {
namespace {

struct Field {
  std::string key;
  std::string type;     // "int", "float", "bool", "string"
  std::string allowed;  // for the reference and the messages
  std::string doc;
  std::function<void(TrainConfig&, const std::string& key, const std::string& text)> set;
  std::function<std::string(const TrainConfig&)> get;
};

// `value` as text that parses back to it exactly: six significant digits where they do
// (the effective config reads as people write it), more where they do not, so that a
// resumed run, which reads its effective config back, trains with the same numbers.
std::string number_text(double value) {
  char text[32];
  for (int digits = 6;; ++digits) {
    std::snprintf(text, sizeof(text), "%.*g", digits, value);
    if (digits >= std::numeric_limits<double>::max_digits10 || parse_number(text) == value) return text;
  }
}

// `text` as a YAML scalar that reads back as the same text: plain where that is safe, else
// quoted with escapes (yaml-cpp's emitter decides), so that a run directory or an option
// name like "a: b" survives the effective config.
std::string yaml_scalar(const std::string& text) {
  YAML::Emitter out;
  out << text;
  return out.c_str();
}

[[noreturn]] void fail(const std::string& key, const std::string& text, const std::string& allowed) {
  throw InvalidArgumentError("config key '" + key + "' = '" + text + "': " + allowed);
}

// Each builder takes `member`, a generic lambda returning a reference to the field, so
// top-level and nested (learner.*) fields are addressed the same way.
template <typename Member>
Field int_field(std::string key, Member member, int64_t low, int64_t high, std::string doc) {
  const std::string allowed =
      "an integer in [" + std::to_string(low) + ", " +
      (high == std::numeric_limits<int64_t>::max() ? std::string("inf") : std::to_string(high)) + "]";
  return {key,
          "int",
          allowed,
          std::move(doc),
          [=](TrainConfig& c, const std::string& k, const std::string& text) {
            const std::optional<int64_t> value = parse_integer(text);
            if (!value || *value < low || *value > high) fail(k, text, "expected " + allowed);
            member(c) = *value;
          },
          [=](const TrainConfig& c) { return std::to_string(member(c)); }};
}

template <typename Member>
Field float_field(std::string key, Member member, double low, double high, std::string doc) {
  std::ostringstream range;
  range << "a number in [" << low << ", " << high << "]";
  const std::string allowed = range.str();
  return {key,
          "float",
          allowed,
          std::move(doc),
          [=](TrainConfig& c, const std::string& k, const std::string& text) {
            const std::optional<double> value = parse_number(text);
            if (!value || *value < low || *value > high) fail(k, text, "expected " + allowed);
            member(c) = *value;
          },
          [=](const TrainConfig& c) { return number_text(member(c)); }};
}

template <typename Member>
Field bool_field(std::string key, Member member, std::string doc) {
  return {key,
          "bool",
          "true or false",
          std::move(doc),
          [=](TrainConfig& c, const std::string& k, const std::string& text) {
            if (text == "true")
              member(c) = true;
            else if (text == "false")
              member(c) = false;
            else
              fail(k, text, "expected true or false");
          },
          [=](const TrainConfig& c) { return std::string(member(c) ? "true" : "false"); }};
}

template <typename Member>
Field string_field(std::string key, Member member, const std::vector<std::string>& choices, std::string doc) {
  std::string allowed = "any string";
  if (!choices.empty()) {
    allowed = "one of";
    for (const auto& choice : choices) allowed += " " + choice;
  }
  return {key,
          "string",
          allowed,
          std::move(doc),
          [=](TrainConfig& c, const std::string& k, const std::string& text) {
            if (!choices.empty() && std::find(choices.begin(), choices.end(), text) == choices.end()) {
              fail(k, text, "expected " + allowed);
            }
            member(c) = text;
          },
          [=](const TrainConfig& c) { return member(c); }};
}

// The keys of the run, its status server, its roles and its environment, in the reference's order.
std::vector<Field> run_fields() {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return {
      int_field(
          "run.seed", [](auto& c) -> auto& { return c.seed; }, 0, kMax,
          "seeds environments, action sampling and initial weights"),
      int_field(
          "run.total_env_steps", [](auto& c) -> auto& { return c.total_env_steps; }, 1, kMax,
          "stop once this many environment steps reached the learners"),
      int_field(
          "run.max_updates", [](auto& c) -> auto& { return c.max_updates; }, 0, kMax,
          "also stop after this many updates; 0 = no limit"),
      string_field(
          "run.dir", [](auto& c) -> auto& { return c.run_dir; }, {},
          "run directory: logs, effective config, per-rank stats"),
      float_field(
          "run.log_interval_s", [](auto& c) -> auto& { return c.log_interval_s; }, 0.01, 86400,
          "seconds between progress lines"),
      string_field(
          "run.log_level", [](auto& c) -> auto& { return c.log_level; },
          {"trace", "debug", "info", "warn", "error", "off"},
          "log level of every rank (console and RUN_DIR/rank<N>.log); KVRL_LOG_LEVEL overrides it"),
      float_field(
          "run.peer_timeout_s", [](auto& c) -> auto& { return c.peer_timeout_s; }, 0, 86400,
          "a rank that hears no heartbeat from a peer for this long ends the job, naming the peer "
          "(UDP heartbeats between ranks, docs/multinode.md); 0 = off, otherwise at least 2"),
      int_field(
          "status.port", [](auto& c) -> auto& { return c.status_port; }, 0, 65535,
          "learner 0 serves /metrics (Prometheus) and /status (JSON) over HTTP on this port; 0 = off"),
      string_field(
          "status.address", [](auto& c) -> auto& { return c.status_address; }, {},
          "the address the status server binds (127.0.0.1: this machine only; 0.0.0.0: every interface)"),
      int_field(
          "remote.port", [](auto& c) -> auto& { return c.remote_port; }, 0, 65535,
          "learner 0 lets actor processes outside the MPI job join and leave on this TCP port (kvrl actor "
          "--connect HOST:PORT, docs/reliability.md); 0 = off"),
      string_field(
          "remote.address", [](auto& c) -> auto& { return c.remote_address; }, {},
          "the address learner 0 listens on for remote actors (127.0.0.1: this machine only)"),
      string_field(
          "remote.token_file", [](auto& c) -> auto& { return c.remote_token_file; }, {},
          "a file holding the shared secret every remote actor presents; required with remote.port"),
      int_field(
          "remote.max_actors", [](auto& c) -> auto& { return c.remote_max_actors; }, 1, 4096,
          "remote actors connected at once; more are refused, naming the limit"),
      int_field(
          "learners", [](auto& c) -> auto& { return c.learners; }, 1, 1024,
          "learner ranks (the lowest ranks); the other ranks act")};
}

// The keys of the environment.
std::vector<Field> env_fields() {
  return {
      string_field(
          "env.name", [](auto& c) -> auto& { return c.env_name; }, {},
          "a built-in environment (see docs/environments.md), or gym:<id> for any Gymnasium environment "
          "(keyword arguments for gymnasium.make as env.kwargs.<name>: value)"),
      string_field(
          "env.plugin", [](auto& c) -> auto& { return c.env_plugin; }, {},
          "path of an environment plugin; replaces env.name"),
      int_field(
          "env.num_envs", [](auto& c) -> auto& { return c.num_envs; }, 1, 65536,
          "environments stepped together by each actor"),
      string_field(
          "env.observe", [](auto& c) -> auto& { return c.env_observe; }, {"all", "positions", "velocities"},
          "the part of the observation the policy sees: all, or (MuJoCo environments) joint positions only "
          "or velocities only, the partially observed variants"),
      string_field(
          "env.gym_setup", [](auto& c) -> auto& { return c.env_gym_setup; }, {},
          "gym:<id>: Python callables as module:attribute, a YAML list or comma-separated, called in order "
          "before the id is made while Gymnasium does not know it (e.g. minatar.gym:register_envs)"),
      string_field(
          "env.gym_wrappers", [](auto& c) -> auto& { return c.env_gym_wrappers; }, {},
          "gym:<id>: Gymnasium wrappers as module:attribute, a YAML list or comma-separated, applied to each "
          "environment in order (e.g. minigrid.wrappers:ImgObsWrapper)"),
      string_field(
          "env.stepping", [](auto& c) -> auto& { return c.env_stepping; }, {"lockstep", "async"},
          "lockstep: the policy steps once every environment has stepped; async: it steps whichever "
          "environments are ready (at least env.min_ready), so a slow one holds up only itself (native "
          "environments)"),
      int_field(
          "env.step_threads", [](auto& c) -> auto& { return c.env_step_threads; }, 0, 4096,
          "threads stepping each actor's environments; 0 = the actor's own thread (lockstep) or one per "
          "environment (async)"),
      int_field(
          "env.min_ready", [](auto& c) -> auto& { return c.env_min_ready; }, 1, 65536,
          "env.stepping = async: the policy steps once at least this many environments are ready (at most "
          "env.num_envs), taking every one ready by then"),
      float_field(
          "env.step_delay_ms", [](auto& c) -> auto& { return c.env_step_delay_ms; }, 0, 60000,
          "a slow environment for benchmarks and tests: each step of environment 0 sleeps this long (native "
          "environments); 0 = none"),
      float_field(
          "env.step_delay_spread", [](auto& c) -> auto& { return c.env_step_delay_spread; }, 1, 1000,
          "with env.step_delay_ms: the last environment sleeps this many times as long, the others evenly in "
          "between"),
      string_field(
          "env.mujoco_model_dir", [](auto& c) -> auto& { return c.mujoco_model_dir; }, {},
          "folder of Gymnasium's MuJoCo model XML files (gymnasium/envs/mujoco/assets); empty = the one "
          "scripts/setup.sh found")};
}

// The keys of the policy, in the reference's order.
std::vector<Field> model_fields() {
  return {
      int_field(
          "model.hidden_size", [](auto& c) -> auto& { return c.hidden_size; }, 1, 65536, "transformer width"),
      int_field(
          "model.num_layers", [](auto& c) -> auto& { return c.num_layers; }, 1, 256, "transformer blocks"),
      int_field(
          "model.num_heads", [](auto& c) -> auto& { return c.num_heads; }, 1, 1024,
          "attention heads; must divide hidden_size"),
      int_field(
          "model.max_seq_len", [](auto& c) -> auto& { return c.max_seq_len; }, 2, 1 << 20,
          "the longest context: learned positions and cache slots (segment), the widest window (sliding)"),
      string_field(
          "model.positions", [](auto& c) -> auto& { return c.positions; }, {"learned", "rotary"},
          "learned: a table of max_seq_len positions added to the input (the reference); rotary: queries and "
          "keys rotated by position, so attention sees distances and can slide"),
      string_field(
          "model.context", [](auto& c) -> auto& { return c.context; }, {"segment", "sliding"},
          "what a step attends to once its episode outgrows the context: segment restarts the context every "
          "max_seq_len - 1 steps (recorded as is_init); sliding attends to the last attention_window steps "
          "(rotary positions only; the cache is a ring of that many slots)"),
      int_field(
          "model.attention_window", [](auto& c) -> auto& { return c.attention_window; }, 0, 1 << 20,
          "context=sliding: the steps each step attends to, itself included, at most max_seq_len; 0 = "
          "max_seq_len. Must stay 0 with context=segment"),
      int_field(
          "model.dim_feedforward", [](auto& c) -> auto& { return c.dim_feedforward; }, 0, 1 << 20,
          "MLP width; 0 = 4 * hidden_size"),
      bool_field(
          "model.temporal_context", [](auto& c) -> auto& { return c.temporal_context; },
          "false: every step sees only its own observation (the memoryless baseline)"),
      string_field(
          "model.critic", [](auto& c) -> auto& { return c.critic; }, {"trunk", "mlp"},
          "where the values come from: trunk, a linear head on the transformer's features (the value loss "
          "trains the trunk too); mlp, a separate tanh MLP on the current observation (CleanRL's MuJoCo "
          "critic: value gradients leave the policy's features alone, values see no history). mlp needs "
          "model.encoder = mlp"),
      int_field(
          "model.critic_hidden_size", [](auto& c) -> auto& { return c.critic_hidden_size; }, 1, 65536,
          "critic = mlp: the width of its two hidden layers"),
      bool_field(
          "model.normalize_observations", [](auto& c) -> auto& { return c.normalize_observations; },
          "observations enter the policy as (x - mean) / std, clipped to +-observation_clip, with running "
          "statistics the learners update after every update; part of the policy (weights, checkpoints, "
          "export)"),
      float_field(
          "model.observation_clip", [](auto& c) -> auto& { return c.observation_clip; }, 1e-3, 1e6,
          "normalize_observations: the bound on a normalised observation"),
      bool_field(
          "model.normalize_rewards", [](auto& c) -> auto& { return c.normalize_rewards; },
          "the losses see rewards divided by the running std of the discounted return (Gymnasium's "
          "NormalizeReward), times learner.reward_scale; the statistics are part of the policy"),
      bool_field(
          "model.cuda_graphs", [](auto& c) -> auto& { return c.cuda_graphs; },
          "on CUDA, capture the actors' cached step in a CUDA graph per batch size (a failed capture is "
          "logged and "
          "steps run without); no effect on CPU")};
}

// The keys of the image encoder (model.encoder = cnn).
std::vector<Field> encoder_fields() {
  return {
      string_field(
          "model.encoder", [](auto& c) -> auto& { return c.encoder; }, {"mlp", "cnn"},
          "mlp: the flat observation enters the transformer's input projection; cnn: image observations "
          "([H, W, C] or [H, W] boxes) pass a convolutional encoder (cnn_layers, then a linear layer to "
          "cnn_features) first"),
      string_field(
          "model.cnn_layers", [](auto& c) -> auto& { return c.cnn_layers; }, {},
          "encoder = cnn: convolutions with ReLU as CHANNELSxKERNELsSTRIDE, a YAML list or comma-separated "
          "(default: the Nature CNN's; small images need smaller ones, e.g. 16x3s1 for MinAtar's 10x10)"),
      int_field(
          "model.cnn_features", [](auto& c) -> auto& { return c.cnn_features; }, 1, 1 << 16,
          "encoder = cnn: the width of the linear layer after the convolutions, the transformer's input"),
      float_field(
          "model.cnn_input_scale", [](auto& c) -> auto& { return c.cnn_input_scale; }, 0, 1e6,
          "encoder = cnn: observations are multiplied by this first; 0 = from the observation space (1 / its "
          "largest bound for uint8 observations, so pixels enter in [0, 1]; 1 for float ones)")};
}

// The keys of the losses and the optimizer, in the reference's order.
std::vector<Field> loss_fields() {
  return {string_field(
              "learner.algorithm", [](auto& c) -> auto& { return c.learner.algorithm; }, {"ppo", "vtrace"},
              "the loss"),
          float_field(
              "learner.learning_rate", [](auto& c) -> auto& { return c.learner.learning_rate; }, 1e-8, 1.0,
              "Adam step size"),
          string_field(
              "learner.lr_schedule", [](auto& c) -> auto& { return c.learner.lr_schedule; },
              {"constant", "linear"}, "linear decays to 0 at the planned number of updates"),
          string_field(
              "learner.entropy_schedule", [](auto& c) -> auto& { return c.learner.entropy_schedule; },
              {"constant", "linear"}, "linear decays entropy_coef to 0 at the planned number of updates"),
          float_field(
              "learner.max_grad_norm", [](auto& c) -> auto& { return c.learner.max_grad_norm; }, 0, 1e6,
              "gradient-norm clip; 0 = off"),
          float_field(
              "learner.reward_scale", [](auto& c) -> auto& { return c.learner.reward_scale; }, 1e-9, 1e9,
              "rewards are multiplied by this in the losses, not in the reported returns"),
          float_field(
              "learner.gamma", [](auto& c) -> auto& { return c.learner.gamma; }, 0, 1, "discount")};
}

// The keys of the advantages (PPO's GAE and both algorithms' standardisation) and PPO's clips.
std::vector<Field> ppo_fields() {
  return {float_field(
              "learner.gae_lambda", [](auto& c) -> auto& { return c.learner.gae_lambda; }, 0, 1,
              "GAE lambda (PPO)"),
          float_field(
              "learner.clip_epsilon", [](auto& c) -> auto& { return c.learner.clip_epsilon; }, 1e-6, 1,
              "ratio clip (PPO)"),
          bool_field(
              "learner.decoupled", [](auto& c) -> auto& { return c.learner.decoupled; },
              "PPO: clip against the learner's policy at the batch start and weight by pi/mu truncated at "
              "rho_bar "
              "(decoupled PPO); false: classic PPO against the behaviour policy"),
          float_field(
              "learner.value_clip", [](auto& c) -> auto& { return c.learner.value_clip; }, 0, 1e6,
              "value clip (PPO); 0 = off"),
          string_field(
              "learner.advantage_normalization",
              [](auto& c) -> auto& { return c.learner.advantage_normalization; },
              {"auto", "batch", "minibatch", "none"},
              "standardise the advantages over the batch (PPO only), over each minibatch (as the reference's "
              "ClipPPOLoss with normalize_advantage) or not at all; auto = batch for ppo, none for vtrace"),
          bool_field(
              "learner.recompute_advantages", [](auto& c) -> auto& { return c.learner.recompute_advantages; },
              "PPO: recompute values, advantages and value targets with the current weights before each "
              "epoch after the first (as the reference's PPO loop); false: once per batch")};
}

// The keys of the optimizer steps per batch, the loss terms' weights and V-trace's clips.
std::vector<Field> step_fields() {
  return {int_field(
              "learner.epochs", [](auto& c) -> auto& { return c.learner.epochs; }, 1, 1000,
              "passes over each batch (PPO; V-trace recomputes its targets each step)"),
          int_field(
              "learner.minibatches", [](auto& c) -> auto& { return c.learner.minibatches; }, 1, 1 << 16,
              "optimizer steps per epoch, each on a share of the batch's rows"),
          float_field(
              "learner.entropy_coef", [](auto& c) -> auto& { return c.learner.entropy_coef; }, 0, 10,
              "entropy bonus weight"),
          float_field(
              "learner.value_coef", [](auto& c) -> auto& { return c.learner.value_coef; }, 0, 100,
              "value loss weight"),
          float_field(
              "learner.rho_bar", [](auto& c) -> auto& { return c.learner.rho_bar; }, 1e-6, 1e6,
              "importance-weight clip (V-trace; decoupled PPO's behaviour weights)"),
          float_field(
              "learner.c_bar", [](auto& c) -> auto& { return c.learner.c_bar; }, 1e-6, 1e6,
              "trace clip (V-trace)")};
}

// The keys of batches, weights and policy lag, in the reference's order.
std::vector<Field> flow_fields() {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return {
      int_field(
          "learner.steps_per_update", [](auto& c) -> auto& { return c.steps_per_update; }, 1, kMax,
          "env steps per update, all learners"),
      int_field(
          "learner.weight_sync_interval", [](auto& c) -> auto& { return c.weight_sync_interval; }, 1, kMax,
          "learner 0 sends weights to the actors every K updates"),
      int_field(
          "learner.max_policy_lag", [](auto& c) -> auto& { return c.max_policy_lag; }, 0, kMax,
          "drop episodes acted on by weights older than this many versions; 0 = keep all"),
      string_field(
          "learner.credit_return", [](auto& c) -> auto& { return c.credit_return; },
          {"when_batched", "when_trained"},
          "when a batch's steps go back to their actors' credit: when_batched (as the update takes them, so "
          "actors collect the next batch while it trains: more env steps/s, a policy lag of about one update "
          "more) or when_trained (after the update and its weight broadcast, so with actor.credit_steps near "
          "one batch, actors and learners take turns and actors act on the newest weights)"),
      int_field(
          "learner.max_consecutive_skips", [](auto& c) -> auto& { return c.max_consecutive_skips; }, 1,
          1000000,
          "an update with a NaN or Inf loss or gradient is skipped; after this many in a row the run stops")};
}

// The keys of devices, collectives, precision and threads, in the reference's order.
std::vector<Field> placement_fields() {
  return {
      string_field(
          "learner.device", [](auto& c) -> auto& { return c.learner_device; }, {},
          "auto (a GPU by local rank when there is one, else CPU), cpu, cuda or cuda:N; no usable GPU: CPU, "
          "logged"),
      float_field(
          "learner.allreduce_bucket_mb", [](auto& c) -> auto& { return c.allreduce_bucket_mb; }, 0.001, 4096,
          "gradients are averaged over the learners in flat buckets of at most this many MiB"),
      bool_field(
          "learner.overlap_allreduce", [](auto& c) -> auto& { return c.learner.overlap_allreduce; },
          "start each bucket's all-reduce as soon as backward has produced its gradients (true) or "
          "all of them after backward (false)"),
      float_field(
          "learner.nccl_timeout_s", [](auto& c) -> auto& { return c.nccl_timeout_s; }, 1, 86400,
          "an NCCL collective of the learners, or a staged weight broadcast, still running after this many "
          "seconds stops the run"),
      string_field(
          "learner.weight_broadcast", [](auto& c) -> auto& { return c.weight_broadcast; },
          {"auto", "mpi_messages", "mpi_broadcast", "nccl"},
          "how learner 0 sends weights to the actors: auto = nccl when learner 0 and every actor are on "
          "GPUs of their own, else mpi_messages (one message per actor); mpi_broadcast and nccl announce "
          "each version and broadcast into the actors' staging buffers"),
      string_field(
          "learner.window_attention", [](auto& c) -> auto& { return c.learner_window_attention; },
          {"episodes", "whole"},
          "episodes: the window forward attends context by context (or in tiles) where the packed episodes "
          "allow; whole: one masked call over each [B, T] window, as the reference (same results, slower)"),
      string_field(
          "learner.autocast", [](auto& c) -> auto& { return c.learner_autocast; }, {"none", "bfloat16"},
          "bfloat16: the learner's window forward runs under autocast (losses, gradients and Adam stay "
          "float32); meant for GPUs: on a CPU with AVX-512 BF16 it was 1.9x slower at width 64 "
          "(docs/gpu.md)"),
      string_field(
          "actor.autocast", [](auto& c) -> auto& { return c.actor_autocast; }, {"none", "bfloat16"},
          "bfloat16: actors step under autocast and keep their key/value caches in bf16 (half the "
          "memory and cache reads), as the reference does under torch.autocast"),
      int_field(
          "learner.threads", [](auto& c) -> auto& { return c.learner_threads; }, 1, 256,
          "intra-op threads of each learner rank; ranks share a node's cores, so the threads of all "
          "ranks on a node should not exceed its cores"),
      int_field(
          "actor.threads", [](auto& c) -> auto& { return c.actor_threads; }, 1, 256,
          "intra-op threads of each actor rank (as learner.threads)"),
      string_field(
          "actor.device", [](auto& c) -> auto& { return c.actor_device; }, {},
          "auto, cpu, cuda or cuda:N, as learner.device: where the policy, its caches and sampling run")};
}

// The keys of checkpoints and the actors' credit and context, in the reference's order.
std::vector<Field> checkpoint_and_actor_fields() {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  return {
      int_field(
          "checkpoint.interval_updates", [](auto& c) -> auto& { return c.checkpoint_interval_updates; }, 1,
          kMax, "learner 0 writes a checkpoint every this many updates (and at the end)"),
      float_field(
          "checkpoint.interval_s", [](auto& c) -> auto& { return c.checkpoint_interval_s; }, 1, 1e9,
          "or after this many seconds since the last one, whichever comes first"),
      int_field(
          "checkpoint.keep", [](auto& c) -> auto& { return c.checkpoint_keep; }, 1, 1000000,
          "the newest checkpoints kept in <run.dir>/checkpoints"),
      int_field(
          "actor.credit_steps", [](auto& c) -> auto& { return c.credit_steps; }, 1, int64_t{1} << 40,
          "env steps an actor may have in flight to each learner (flow control)"),
      string_field(
          "actor.on_weight_update", [](auto& c) -> auto& { return c.on_weight_update; },
          {"restart", "reprefill", "keep"},
          "what new weights do to a stream's live context: restart it (the reference's mark_weight_update; "
          "recorded as is_init, so the learner's windows restart there too), reprefill (rebuild the cache "
          "from the context's observations with the new weights) or keep (go on attending to the keys and "
          "values the old weights computed, as in-flight updates do; the learner recomputes with its own)"),
      int_field(
          "actor.fragment_steps", [](auto& c) -> auto& { return c.fragment_steps; }, 0, 1 << 20,
          "ship each episode in fragments of this many steps, each with the context prefix its first step "
          "attended to; 0 = whole episodes (the environment needs a time limit)"),
      string_field(
          "actor.collect", [](auto& c) -> auto& { return c.collect; }, {"episodes", "batches"},
          "episodes: ship each episode (or fragment) as it ends, charging the credit then; batches: charge "
          "steps as they are acted and, once the credit is spent, cut every open episode into a fragment and "
          "ship everything, as TorchRL's collector returns [streams, T] batches (with "
          "learner.credit_return = when_trained and one batch of credit, every step is trained on by the "
          "weights that acted it)")};
}

const std::vector<Field>& schema() {
  static const std::vector<Field> fields = [] {
    std::vector<Field> all;
    for (auto section : {run_fields, env_fields, model_fields, encoder_fields, loss_fields, ppo_fields,
                         step_fields, flow_fields, placement_fields, checkpoint_and_actor_fields}) {
      std::vector<Field> keys = section();
      all.insert(all.end(), std::make_move_iterator(keys.begin()), std::make_move_iterator(keys.end()));
    }
    return all;
  }();
  return fields;
}

// Whether `text` is UTF-8 without surrogates or noncharacters: what the effective config
// can hold, since yaml-cpp's emitter writes anything else as U+FFFD.
bool is_unicode_text(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80                   ? 1
                          : lead >= 0xc2 && lead < 0xe0 ? 2
                          : lead >= 0xe0 && lead < 0xf0 ? 3
                          : lead >= 0xf0 && lead < 0xf5 ? 4
                                                        : 0;
    if (length == 0 || i + length > text.size()) return false;
    uint32_t code_point = length == 1 ? lead : lead & (0x3f >> (length - 1));
    for (size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xc0) != 0x80) return false;
      code_point = (code_point << 6) | (next & 0x3f);
    }
    const uint32_t shortest_from[] = {0, 0, 0x80, 0x800, 0x10000};
    if (code_point < shortest_from[length] || code_point > 0x10ffff ||
        (code_point >= 0xd800 && code_point <= 0xdfff) || (code_point >= 0xfdd0 && code_point <= 0xfdef) ||
        (code_point & 0xfffe) == 0xfffe) {
      return false;
    }
    i += length;
  }
  return true;
}

void apply(TrainConfig& config, const std::string& key, const std::string& text) {
  if (!is_unicode_text(key) || !is_unicode_text(text))
    fail(key, text, "expected UTF-8 text (what the effective config, which a resumed run reads, can hold)");
  static const std::string kEnvOptions = "env.options.";
  if (key.rfind(kEnvOptions, 0) == 0 && key.size() > kEnvOptions.size()) {
    const std::optional<double> value = parse_number(text);
    if (!value) fail(key, text, "expected a number");
    config.env_options[key.substr(kEnvOptions.size())] = *value;
    return;
  }
  static const std::string kEnvKwargs = "env.kwargs.";
  if (key.rfind(kEnvKwargs, 0) == 0 && key.size() > kEnvKwargs.size()) {
    config.env_kwargs[key.substr(kEnvKwargs.size())] = text;
    return;
  }
  for (const Field& field : schema()) {
    if (field.key == key) {
      field.set(config, key, text);
      return;
    }
  }
  // The key's name before issue #19: the config.yaml of older run directories and
  // checkpoints holds it, so it maps exactly onto its replacement.
  if (key == "actor.keep_context_on_update") {
    if (text != "true" && text != "false") {
      fail(
          key, text,
          "expected true or false (replaced by actor.on_weight_update: true is reprefill, false is restart)");
    }
    config.on_weight_update = text == "true" ? "reprefill" : "restart";
    return;
  }
  throw InvalidArgumentError("unknown config key '" + key + "' (the keys are listed in docs/config.md)");
}

// Bounds on the YAML tree walked: keys nest three deep (env.options.<name>) and a config
// has about 70, but aliases make a graph of the tree. Without them a few bytes would
// recurse until the stack overflows (`a: &a {b: *a}`, a map inside itself) or expand for
// hours (each of 40 maps aliasing the one before it twice).
constexpr int kMaxConfigDepth = 16;
constexpr size_t kMaxConfigNodes = 10000;

// The keys whose value is a list. YAML may write one as a sequence of values or as one
// comma-separated string; the key's own check sees the comma-separated string either way.
constexpr std::array<const char*, 3> kListKeys = {"env.gym_setup", "env.gym_wrappers", "model.cnn_layers"};

bool is_list_key(const std::string& key) {
  return std::any_of(kListKeys.begin(), kListKeys.end(),
                     [&](const char* list_key) { return key == list_key; });
}

std::string list_keys_text() {
  std::string text;
  for (const char* key : kListKeys) text += (text.empty() ? "" : ", ") + std::string(key);
  return text;
}

std::string comma_joined(const YAML::Node& sequence, const std::string& key) {
  std::string joined;
  for (const auto& item : sequence) {
    if (!item.IsScalar() || item.Scalar().empty() || item.Scalar().find(',') != std::string::npos) {
      throw InvalidArgumentError(
          "config key '" + key +
          "': each entry of its list must be one non-empty value without commas, "
          "e.g. [minigrid.wrappers:OneHotPartialObsWrapper, minigrid.wrappers:ImgObsWrapper]");
    }
    joined += (joined.empty() ? "" : ",") + item.Scalar();
  }
  return joined;
}

void flatten(const YAML::Node& node, const std::string& prefix, int depth, size_t& nodes,
             std::vector<std::pair<std::string, std::string>>& out) {
  if (++nodes > kMaxConfigNodes) {
    throw InvalidArgumentError("the config holds more than " + std::to_string(kMaxConfigNodes) +
                               " values (YAML aliases that expand into more aliases?)");
  }
  if (node.IsMap()) {
    if (depth == kMaxConfigDepth) {
      throw InvalidArgumentError("config key '" + prefix.substr(0, 200) + "' nests deeper than " +
                                 std::to_string(kMaxConfigDepth) +
                                 " levels (a YAML alias of a map inside itself?)");
    }
    for (const auto& item : node)
      flatten(item.second,
              prefix.empty() ? item.first.as<std::string>() : prefix + "." + item.first.as<std::string>(),
              depth + 1, nodes, out);
  } else if (node.IsScalar()) {
    out.emplace_back(prefix, node.Scalar());
  } else if (node.IsNull()) {
    out.emplace_back(prefix, "");
  } else if (node.IsSequence() && is_list_key(prefix)) {
    out.emplace_back(prefix, comma_joined(node, prefix));
  } else {
    throw InvalidArgumentError(
        "config key '" + prefix +
        "' must be a single value, not a list (the keys that take a list: " + list_keys_text() + ")");
  }
}

}  // namespace

namespace {

// The config's entries, from the YAML text and then the overrides; malformed overrides
// are added to `problems`.
std::vector<std::pair<std::string, std::string>> config_entries(const std::string& yaml_text,
                                                                const std::vector<std::string>& overrides,
                                                                std::vector<std::string>& problems) {
  std::vector<std::pair<std::string, std::string>> entries;
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (root && !root.IsNull()) {
      if (!root.IsMap()) throw InvalidArgumentError("the config must be a YAML mapping of keys to values");
      size_t nodes = 0;
      flatten(root, "", /*depth=*/0, nodes, entries);
    }
  } catch (const YAML::Exception& error) {
    throw InvalidArgumentError(std::string("the config is not valid YAML: ") + error.what());
  }
  for (const std::string& item : overrides) {
    const size_t equals = item.find('=');
    if (equals == std::string::npos || equals == 0) {
      problems.push_back("override '" + item + "' must be key=value, e.g. learner.learning_rate=1e-3");
      continue;
    }
    entries.emplace_back(item.substr(0, equals), item.substr(equals + 1));
  }
  return entries;
}

// Checks between keys, once every key has its value.
// The position scheme, the context policy and the window must agree.
void check_context_keys(const TrainConfig& config) {
  const std::string window = std::to_string(config.attention_window);
  if (config.context == "sliding" && config.positions != "rotary") {
    throw InvalidArgumentError(
        "config: model.context = sliding needs model.positions = rotary (learned absolute positions "
        "cannot slide past max_seq_len), got model.positions = " +
        config.positions);
  }
  if (config.context == "segment" && config.attention_window != 0) {
    throw InvalidArgumentError("config: model.attention_window (" + window +
                               ") applies to model.context = sliding; keep it 0 with context = segment");
  }
  if (config.attention_window > config.max_seq_len) {
    throw InvalidArgumentError("config: model.attention_window (" + window +
                               ") must be in [0, model.max_seq_len = " + std::to_string(config.max_seq_len) +
                               "]");
  }
  if (config.positions == "rotary" && (config.hidden_size / config.num_heads) % 2 != 0) {
    throw InvalidArgumentError(
        "config: model.positions = rotary needs an even head size; model.hidden_size / "
        "model.num_heads = " +
        std::to_string(config.hidden_size / config.num_heads));
  }
}

// Each entry must read module:attribute (dotted names allowed), which the bridge imports.
void check_python_callables(const TrainConfig& config) {
  static const std::regex name(R"([A-Za-z_]\w*(\.[A-Za-z_]\w*)*)");
  for (const auto& [key, text] :
       {std::pair{"env.gym_setup", config.env_gym_setup}, {"env.gym_wrappers", config.env_gym_wrappers}}) {
    for (const std::string& entry : TrainConfig::comma_separated(text)) {
      const size_t colon = entry.find(':');
      if (colon == std::string::npos || !std::regex_match(entry.substr(0, colon), name) ||
          !std::regex_match(entry.substr(colon + 1), name)) {
        fail(key, text,
             "entry '" + entry + "' is not a Python module:attribute (e.g. minatar.gym:register_envs)");
      }
    }
  }
}

// Batches cut every stream's episode between two steps, and each step needs credit for a
// step of every stream.
void check_collection_keys(const TrainConfig& config) {
  if (config.collect != "batches") return;
  if (config.env_stepping != "lockstep") {
    fail("actor.collect", config.collect,
         "batches are cut between two steps of every environment: needs env.stepping = lockstep, not " +
             config.env_stepping);
  }
  if (config.credit_steps * config.learners < config.num_envs) {
    fail("actor.credit_steps", std::to_string(config.credit_steps),
         "with actor.collect = batches, credit_steps x learners (" + std::to_string(config.learners) +
             ") must cover one step of every environment (env.num_envs = " + std::to_string(config.num_envs) +
             ")");
  }
}

// Gymnasium's vector API steps every environment together, in its own loop.
void check_stepping_keys(const TrainConfig& config) {
  if (!config.env_plugin.empty() || !is_gym_environment(config.env_name)) return;
  if (config.env_stepping != "lockstep") {
    fail("env.stepping", config.env_stepping,
         "gym:<id> environments step together through Gymnasium's vector API: use lockstep, or a native "
         "environment");
  }
  if (config.env_step_threads != 0) {
    fail("env.step_threads", std::to_string(config.env_step_threads),
         "gym:<id> environments step in Gymnasium's own vector loop: use 0");
  }
  if (config.env_step_delay_ms != 0) {
    fail("env.step_delay_ms", number_text(config.env_step_delay_ms),
         "the step delay applies to native environments only: use 0 with gym:<id>");
  }
}

void check_encoder_keys(const TrainConfig& config) {
  try {
    parse_conv_layers(config.cnn_layers);
  } catch (const InvalidArgumentError& error) {
    fail("model.cnn_layers", config.cnn_layers, error.what());
  }
  if (config.encoder == "cnn" && config.critic == "mlp") {
    fail("model.critic", config.critic,
         "the MLP critic reads the flat observation; with model.encoder = cnn use trunk");
  }
  if (config.encoder == "cnn" && config.normalize_observations) {
    throw InvalidArgumentError(
        "config: model.normalize_observations = true does not apply with model.encoder = cnn, which scales "
        "its input by model.cnn_input_scale instead; set one of them otherwise");
  }
}

// V-trace's targets exist one minibatch at a time and are recomputed at every step.
void check_advantage_keys(const TrainConfig& config) {
  const auto problem = advantage_key_problem(config.learner.algorithm, config.learner.advantage_normalization,
                                             config.learner.recompute_advantages);
  if (problem) fail(problem->key, problem->value, problem->allowed);
}

void check_consistency(const TrainConfig& config) {
  for (const auto& [key, value] :
       {std::pair{"learner.device", config.learner_device}, {"actor.device", config.actor_device}}) {
    try {
      DeviceRequest::parse(value);
    } catch (const InvalidArgumentError&) {
      fail(key, value, "expected auto, cpu, cuda or cuda:N (N a GPU index)");
    }
  }
  for (const auto& [key, value] :
       {std::pair{"status.address", config.status_address}, {"remote.address", config.remote_address}}) {
    unsigned char address[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, value.c_str(), address) != 1 && inet_pton(AF_INET6, value.c_str(), address) != 1) {
      fail(key, value, "expected an IPv4 or IPv6 address, e.g. 127.0.0.1 or 0.0.0.0");
    }
  }
  if (config.remote_port > 0 && config.remote_token_file.empty()) {
    fail("remote.token_file", "",
         "remote.port is set, so remote actors need a shared token: name a file holding it");
  }
  if (config.peer_timeout_s != 0 && config.peer_timeout_s < 2) {
    fail("run.peer_timeout_s", number_text(config.peer_timeout_s),
         "expected 0 (no heartbeats) or at least 2 seconds (heartbeats go out every second or tenth of it)");
  }
  const std::string lag_problem = policy_lag_problem(config.max_policy_lag, config.weight_sync_interval);
  if (!lag_problem.empty()) throw InvalidArgumentError("config: " + lag_problem);
  if (config.hidden_size % config.num_heads != 0) {
    throw InvalidArgumentError("config: model.num_heads (" + std::to_string(config.num_heads) +
                               ") must divide model.hidden_size (" + std::to_string(config.hidden_size) +
                               ")");
  }
  check_context_keys(config);
  check_encoder_keys(config);
  check_advantage_keys(config);
  check_python_callables(config);
  check_stepping_keys(config);
  check_collection_keys(config);
}

}  // namespace

// Every bad key is reported, not just the first: one error, one line per problem.
TrainConfig TrainConfig::parse(const std::string& yaml_text, const std::vector<std::string>& overrides) {
  TrainConfig config;
  std::vector<std::string> problems;
  for (const auto& [key, text] : config_entries(yaml_text, overrides, problems)) {
    try {
      apply(config, key, text);
    } catch (const InvalidArgumentError& error) {
      problems.push_back(error.what());
    }
  }
  if (problems.empty()) check_consistency(config);  // cross-key checks need every key's real value
  if (problems.size() == 1) throw InvalidArgumentError(problems.front());
  if (!problems.empty()) {
    std::string message = std::to_string(problems.size()) + " problems in the config:";
    for (const std::string& problem : problems) message += "\n  " + problem;
    throw InvalidArgumentError(message);
  }
  return config;
}

std::vector<std::string> TrainConfig::comma_separated(const std::string& text) {
  std::vector<std::string> entries;
  std::stringstream parts(text);
  for (std::string part; std::getline(parts, part, ',');) {
    const size_t first = part.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    entries.push_back(part.substr(first, part.find_last_not_of(" \t") - first + 1));
  }
  return entries;
}

LearnerOptions TrainConfig::learner_options() const {
  LearnerOptions options = learner;
  options.planned_updates = (total_env_steps + steps_per_update - 1) / steps_per_update;
  if (max_updates > 0) options.planned_updates = std::min(options.planned_updates, max_updates);
  options.allreduce_bucket_bytes = allreduce_bucket_bytes();
  return options;
}

int64_t TrainConfig::allreduce_bucket_bytes() const {
  return std::max<int64_t>(1, static_cast<int64_t>(allreduce_bucket_mb * (1 << 20)));
}

TrainConfig TrainConfig::load(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw InvalidArgumentError("cannot read config file '" + path + "'");
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), overrides);
}

std::string TrainConfig::to_yaml() const {
  std::map<std::string, std::string> values;
  for (const Field& field : schema()) values[field.key] = field.get(*this);
  for (const auto& [name, value] : env_options) values["env.options." + name] = number_text(value);
  for (const auto& [name, value] : env_kwargs) values["env.kwargs." + name] = value;
  std::ostringstream yaml;
  for (const auto& [key, value] : values) yaml << yaml_scalar(key) << ": " << yaml_scalar(value) << "\n";
  return yaml.str();
}

uint64_t TrainConfig::actor_identity_hash() const {
  // What each actor may choose for itself: where files are, its device and threads, and how
  // its environments step. Not its credit: learner 0's queue is bounded by it.
  static const std::set<std::string> kLocal = {
      "env.mujoco_model_dir", "actor.device",  "actor.threads",     "actor.autocast",       "env.stepping",
      "env.step_threads",     "env.min_ready", "env.step_delay_ms", "env.step_delay_spread"};
  uint64_t hash = 1469598103934665603ULL;
  auto mix = [&](const std::string& text) {
    for (const unsigned char c : text) hash = (hash ^ c) * 1099511628211ULL;
  };
  std::map<std::string, std::string> values;
  for (const Field& field : schema()) {
    const bool shared = field.key.rfind("model.", 0) == 0 || field.key.rfind("env.", 0) == 0 ||
                        field.key.rfind("actor.", 0) == 0;
    if (shared && kLocal.count(field.key) == 0) values[field.key] = field.get(*this);
  }
  for (const auto& [name, value] : env_options) values["env.options." + name] = number_text(value);
  for (const auto& [name, value] : env_kwargs) values["env.kwargs." + name] = value;
  for (const auto& [key, value] : values) mix(key + "=" + value + "\n");
  return hash;
}

std::string TrainConfig::model_difference(const TrainConfig& checkpoint) const {
  auto with_options = [](const TrainConfig& c) {
    std::map<std::string, std::string> values;
    for (const Field& field : schema()) {
      // How many environments an actor steps does not change what the model is.
      // Nor where the model files are read from.
      const bool defines_model = field.key.rfind("model.", 0) == 0 || field.key.rfind("env.", 0) == 0;
      if (defines_model && field.key != "env.num_envs" && field.key != "env.mujoco_model_dir")
        values[field.key] = field.get(c);
    }
    for (const auto& [name, value] : c.env_options) values["env.options." + name] = std::to_string(value);
    for (const auto& [name, value] : c.env_kwargs) values["env.kwargs." + name] = value;
    return values;
  };
  const auto mine = with_options(*this), theirs = with_options(checkpoint);
  for (const auto& [key, value] : theirs) {
    auto found = mine.find(key);
    const std::string now = found == mine.end() ? "unset" : "'" + found->second + "'";
    if (found == mine.end() || found->second != value)
      return key + ": '" + value + "' in the checkpoint, " + now + " now";
  }
  for (const auto& [key, value] : mine) {
    if (!theirs.count(key)) return key + ": unset in the checkpoint, '" + value + "' now";
  }
  return "";
}

std::string TrainConfig::reference_markdown() {
  const TrainConfig defaults;
  std::ostringstream out;
  out << "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const Field& field : schema()) {
    std::string value = field.get(defaults);
    out << "| `" << field.key << "` | " << field.type << " | `" << (value.empty() ? "\"\"" : value) << "` | "
        << field.allowed << " | " << field.doc << " |\n";
  }
  out << "| `env.options.<name>` | float | | a number | an option of the environment (see "
         "docs/environments.md) |\n";
  return out.str();
}

}  // namespace kvrl
