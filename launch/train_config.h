// The configuration of a training run: one typed struct, every field with its default
// and a one-line doc, mapped from YAML (configs/*.yaml) and `key=value` overrides with
// dotted keys. Every key is validated before any rank starts work: an unknown key, a
// wrong type or a value out of range stops the run with the key named and what is
// allowed. The schema also prints the effective config and the config reference.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "learner/learner.h"

namespace kvrl {

struct TrainConfig {
  // run
  int64_t seed = 0;                     // seeds environments, sampling and initial weights
  int64_t total_env_steps = 200000;     // stop after this many environment steps reach the learners
  int64_t max_updates = 0;              // also stop after this many updates; 0 = no limit
  std::string run_dir = "runs/latest";  // logs, effective config and stats go here
  double log_interval_s = 5.0;          // seconds between progress lines
  std::string log_level = "info";       // KVRL_LOG_LEVEL overrides it
  double peer_timeout_s = 30;           // a rank silent this long ends the run; 0 = no heartbeats
  int64_t status_port = 0;              // learner 0 serves /metrics and /status here; 0 = off
  std::string status_address = "127.0.0.1";
  int64_t remote_port = 0;                   // learner 0 lets remote actors join on this TCP port; 0 = off
  std::string remote_address = "127.0.0.1";  // the interface it listens on
  std::string remote_token_file;             // the shared secret remote actors must present
  int64_t remote_max_actors = 64;            // remote actors connected at once
  int64_t learners = 1;                      // learner ranks (the lowest ranks); the others act
  // env
  std::string env_name = "CartPole-v1";           // a built-in environment
  std::string env_plugin;                         // or a plugin shared library (overrides env.name)
  int64_t num_envs = 16;                          // environments per actor
  std::map<std::string, double> env_options;      // env.options.<name>: per-environment options
  std::map<std::string, std::string> env_kwargs;  // env.kwargs.<name>: gymnasium.make's, for gym:<id>
  std::string env_observe = "all";                // all, positions or velocities (MuJoCo environments)
  std::string mujoco_model_dir;                   // Gymnasium's model XML folder; empty: found at set-up
  std::string env_gym_setup;                      // gym:<id>: module:function list, called before make
  std::string env_gym_wrappers;                   // gym:<id>: module:Wrapper list, around each env
  std::string env_stepping = "lockstep";          // lockstep, or async: the policy steps the ready envs
  int64_t env_step_threads = 0;                   // 0: the actor's thread (lockstep), one per env (async)
  int64_t env_min_ready = 1;                      // async: ready envs the policy waits for
  double env_step_delay_ms = 0;                   // the first env's sleep after each step
  double env_step_delay_spread = 1;               // the last env's sleep / the first's
  // model
  int64_t hidden_size = 64;
  int64_t num_layers = 2;
  int64_t num_heads = 4;
  int64_t max_seq_len = 512;            // positions a context holds (segment) and the widest window
  std::string positions = "learned";    // learned (the reference's table) or rotary
  std::string context = "segment";      // segment: restart every max_seq_len - 1 steps; sliding: last W
  int64_t attention_window = 0;         // sliding: W, the steps a step attends to; 0 = max_seq_len
  int64_t dim_feedforward = 0;          // 0 = 4 * hidden_size
  bool temporal_context = true;         // false: each step sees only its own observation
  std::string critic = "trunk";         // trunk: a value head on the trunk; mlp: a separate MLP
  int64_t critic_hidden_size = 64;      // critic = mlp: its hidden width
  bool normalize_observations = false;  // running mean/std of observations, part of the policy
  double observation_clip = 10;         // normalised observations are clipped to +-this
  bool normalize_rewards = false;       // rewards scaled by 1 / std of the discounted return
  std::string encoder = "mlp";          // mlp, or cnn for image observations
  std::string cnn_layers = "32x8s4,64x4s2,64x3s1";  // cnn: CHANNELSxKERNELsSTRIDE per layer
  int64_t cnn_features = 512;                       // cnn: the linear layer's width
  double cnn_input_scale = 0;                       // cnn: input multiplier; 0 = from the space
  bool cuda_graphs = true;                          // actors on CUDA replay the cached step from a CUDA graph
  // learner: the loss and optimizer options (planned_updates is derived from the budget)
  LearnerOptions learner;
  int64_t steps_per_update = 4096;             // env steps per update, over all learners
  int64_t weight_sync_interval = 1;            // learner 0 sends weights every K updates
  int64_t max_policy_lag = 0;                  // drop episodes staler than this many versions; 0 = keep all
  std::string credit_return = "when_batched";  // when_batched or when_trained
  int64_t max_consecutive_skips = 3;           // stop after this many non-finite updates in a row
  std::string learner_device = "auto";         // auto, cpu, cuda or cuda:N
  double allreduce_bucket_mb = 25;             // gradient buckets of the learners' all-reduce
  double nccl_timeout_s = 300;                 // a collective running longer stops the run
  std::string weight_broadcast = "auto";       // auto, mpi_messages, mpi_broadcast, nccl
  // episodes: the learner's window attention follows the packed episodes (computed context
  // by context); whole: one masked call over each window, as the reference (same results).
  std::string learner_window_attention = "episodes";
  std::string learner_autocast = "none";  // none or bfloat16: the learner's window forward
  std::string actor_autocast = "none";    // none or bfloat16: the actors' steps and caches
  int64_t learner_threads = 1;            // intra-op threads of a learner rank
  int64_t actor_threads = 1;              // intra-op threads of an actor rank
  // checkpoint
  int64_t checkpoint_interval_updates = 50;  // learner 0 writes a checkpoint every N updates
  double checkpoint_interval_s = 600;        // or every S seconds, whichever comes first
  int64_t checkpoint_keep = 3;               // the newest K checkpoints are kept
  // actor
  std::string actor_device = "auto";           // auto, cpu, cuda or cuda:N
  int64_t credit_steps = 2048;                 // env steps an actor may have in flight to each learner
  std::string on_weight_update = "reprefill";  // restart, reprefill or keep the streams' caches
  int64_t fragment_steps = 0;                  // ship fragments of this many steps; 0 = whole episodes
  std::string collect = "episodes";            // episodes, or batches: ship what the credit paid for

  // The entries of a comma-separated list key (env.gym_setup, env.gym_wrappers), trimmed.
  static std::vector<std::string> comma_separated(const std::string& text);
  // The learner's options with planned_updates derived from the run's budget.
  LearnerOptions learner_options() const;
  int64_t allreduce_bucket_bytes() const;  // allreduce_bucket_mb in bytes, at least 1

  // Parses YAML text, then applies `overrides` ("key=value"). Throws InvalidArgumentError
  // naming the key on an unknown key, a wrong type or a value out of range.
  static TrainConfig parse(const std::string& yaml_text, const std::vector<std::string>& overrides);
  static TrainConfig load(const std::string& path, const std::vector<std::string>& overrides);
  // The first env.* or model.* key whose value differs from `other`'s, as
  // "model.hidden_size: 64 in the checkpoint, 32 now", or "" when they match: a checkpoint
  // of another model or environment cannot be resumed.
  std::string model_difference(const TrainConfig& checkpoint) const;
  // The effective config as YAML with every key, sorted.
  std::string to_yaml() const;
  // A hash of what a remote actor must share with the run: the model, environment and
  // actor keys (not the devices, threads or where the model files are). FNV-1a, 64 bits.
  uint64_t actor_identity_hash() const;
  // Markdown table of every key: type, default, allowed values, doc.
  static std::string reference_markdown();
};

}  // namespace kvrl
