#include "launch/train_command.h"

#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/utils.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include "actor/actor_loop.h"
#include "actor/env_registry.h"
#include "actor/policy_fit.h"
#include "actor/vector_env.h"
#include "common/accelerator_probe.h"
#include "common/errors.h"
#include "common/logger.h"
#include "common/mpi_check.h"
#include "common/mpi_transport.h"
#include "launch/train_config.h"
#include "learner/learner_loop.h"

namespace kvrl {
namespace {

std::unique_ptr<Environment> make_configured_env(const TrainConfig& config) {
  return config.env_plugin.empty() ? make_environment(config.env_name, config.env_options)
                                   : make_plugin_environment(config.env_plugin, config.env_options);
}

ActorCriticOptions model_options(const TrainConfig& config, const Environment& env) {
  ActorCriticOptions options;
  options.transformer.input_size = env.observation_space().flat_size();
  options.transformer.hidden_size = config.hidden_size;
  options.transformer.num_layers = config.num_layers;
  options.transformer.num_heads = config.num_heads;
  options.transformer.max_seq_len = config.max_seq_len;
  if (config.dim_feedforward > 0) options.transformer.dim_feedforward = config.dim_feedforward;
  const PolicyShape shape = policy_shape_for(env.observation_space(), env.action_space());
  options.discrete = shape.discrete;
  options.num_outputs = shape.num_outputs;
  options.temporal_context = config.temporal_context;
  check_policy_fits({*options.transformer.input_size, options.discrete, options.num_outputs}, env.observation_space(),
                    env.action_space());
  return options;
}

std::string json_counts(const std::map<std::string, int64_t>& counts) {
  std::string out = "{";
  for (const auto& [key, value] : counts) out += (out.size() > 1 ? ", " : "") + cat("\"", key, "\": ", value);
  return out + "}";
}
std::string json_counts(const std::map<int, int64_t>& counts) {
  std::map<std::string, int64_t> named;
  for (const auto& [rank, value] : counts) named[std::to_string(rank)] = value;
  return json_counts(named);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error("cannot write '" + path.string() + "'");
}

struct Roles {
  std::vector<int> learners;
  std::vector<int> actors;
};

// Parses args, reads and validates the config and the environment; the same on every rank.
struct Setup {
  TrainConfig config;
  std::unique_ptr<Environment> prototype;
  ActorCriticOptions model;
  EpisodeSpec spec;
};

Setup prepare(const std::vector<std::string>& args) {
  if (args.empty()) throw InvalidArgumentError("train needs a config file: kvrl train CONFIG.yaml [key=value ...]");
  Setup setup;
  setup.config = TrainConfig::load(args[0], {args.begin() + 1, args.end()});
  setup.prototype = make_configured_env(setup.config);
  const int64_t time_limit = setup.prototype->time_limit();
  if (time_limit <= 0) {
    throw InvalidArgumentError(setup.prototype->name() + " has no time limit, so its episodes could outgrow the cache: "
                               "give it one (kvrl trains on complete episodes)");
  }
  if (time_limit + 1 > setup.config.max_seq_len) {
    throw InvalidArgumentError("env time limit (" + std::to_string(time_limit) + ") + 1 exceeds model.max_seq_len (" +
                               std::to_string(setup.config.max_seq_len) +
                               "): raise max_seq_len or lower the time limit (the learner adds one token per episode "
                               "for its final observation)");
  }
  setup.model = model_options(setup.config, *setup.prototype);
  setup.spec = {setup.prototype->observation_space().flat_size(), setup.prototype->action_space().flat_size(), time_limit};
  return setup;
}

}  // namespace

int run_train(const std::vector<std::string>& args) {
  int provided = 0;
  KVRL_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "initialising MPI");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int exit_code = 0;
  try {
    Setup setup = prepare(args);
    TrainConfig& config = setup.config;
    if (config.learners >= size) {
      throw InvalidArgumentError(
          "learners (" + std::to_string(config.learners) + ") needs at least one more rank to act, but " +
          std::to_string(size) + " rank(s) were started: run it as\n  launch/kvrl-mpirun -np " +
          std::to_string(config.learners + 2) + " build/launch/kvrl train " + args[0] +
          "\n(or mpirun --allow-run-as-root --oversubscribe -np N ...), with N >= learners + 1");
    }
    const int64_t share = (config.steps_per_update + config.learners - 1) / config.learners;
    if ((size - config.learners) * config.credit_steps < share) {
      throw InvalidArgumentError("actor.credit_steps (" + std::to_string(config.credit_steps) + ") x " +
                                 std::to_string(size - config.learners) + " actor(s) is less than one learner's share of "
                                 "learner.steps_per_update (" + std::to_string(share) +
                                 "): the learners could never fill a batch; raise actor.credit_steps");
    }
    const bool is_learner = rank < config.learners;
    const std::filesystem::path run_dir = config.run_dir;
    if (rank == 0) {
      std::filesystem::create_directories(run_dir);
      write_text(run_dir / "config.yaml", config.to_yaml());
      std::printf("kvrl train: effective config (saved to %s):\n%s", (run_dir / "config.yaml").c_str(),
                  config.to_yaml().c_str());
      std::fflush(stdout);
    }
    KVRL_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "waiting for the run directory");
    auto logger = std::make_shared<Logger>(rank, is_learner ? "learner" : "actor",
                                           (run_dir / cat("rank", rank, ".log")).string(), "info");
    logger->info(probe_accelerators().summary());
    // Ranks share the cores of a node: one intra-op thread each.
    at::set_num_threads(1);
    torch::manual_seed(config.seed);

    MPI_Comm learner_comm = MPI_COMM_NULL;
    KVRL_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, is_learner ? 0 : 1, rank, &learner_comm),
                   "splitting the learners off");
    Roles roles;
    for (int r = 0; r < size; ++r) (r < config.learners ? roles.learners : roles.actors).push_back(r);
    MpiTransport transport(MPI_COMM_WORLD);
    auto model = std::make_shared<ActorCritic>(setup.model);
    const EpisodeCodec codec(setup.spec);
    std::string stats_json;
    if (is_learner) {
      auto communicator = std::make_shared<MpiCommunicator>(learner_comm);
      Learner learner(model, config.learner_options(), communicator);
      LearnerLoopOptions options;
      options.actor_ranks = roles.actors;
      options.total_env_steps = config.total_env_steps;
      options.max_updates = config.max_updates;
      options.steps_per_update = config.steps_per_update;
      options.weight_sync_interval = config.weight_sync_interval;
      options.max_policy_lag = config.max_policy_lag;
      options.log_interval_s = config.log_interval_s;
      options.metrics_path = (run_dir / "metrics.csv").string();
      LearnerLoop loop(options, transport, communicator, learner, codec, logger);
      const LearnerStats stats = loop.run();
      stats_json = cat("{\"role\": \"learner\", \"rank\": ", rank, ", \"updates\": ", stats.updates,
                       ", \"env_steps\": ", stats.env_steps, ", \"episodes_received\": ", stats.episodes_received,
                       ", \"episodes_used\": ", stats.episodes_used, ", \"dropped\": ", json_counts(stats.dropped),
                       ", \"received_from\": ", json_counts(stats.received_from),
                       ", \"announced_by\": ", json_counts(stats.announced_by), ", \"lag_min\": ", stats.lag_min,
                       ", \"lag_mean\": ", stats.lag_mean, ", \"lag_max\": ", stats.lag_max,
                       ", \"mean_return\": ", stats.mean_return, ", \"wall_seconds\": ", stats.wall_seconds,
                       ", \"parameter_checksum\": \"", stats.parameter_checksum, "\"}");
      if (rank == 0) {
        logger->info(cat("lag min/mean/max ", stats.lag_min, "/", stats.lag_mean, "/", stats.lag_max,
                         ", dropped ", json_counts(stats.dropped)));
        std::printf("kvrl train: finished: env_steps=%lld updates=%lld mean_return=%.2f wall_time=%.1fs\n",
                    static_cast<long long>(stats.env_steps), static_cast<long long>(stats.updates), stats.mean_return,
                    stats.wall_seconds);
      }
    } else {
      std::vector<std::unique_ptr<Environment>> envs;
      for (int64_t i = 0; i < config.num_envs; ++i) envs.push_back(make_configured_env(config));
      VectorEnv env(std::move(envs), static_cast<uint64_t>(config.seed) * 7919 + static_cast<uint64_t>(rank));
      ActorLoopOptions options;
      options.learner_ranks = roles.learners;
      options.credit_steps = config.credit_steps;
      options.keep_context_on_update = config.keep_context_on_update;
      options.seed = static_cast<uint64_t>(config.seed);
      if (const char* corrupt = std::getenv("KVRL_FAULT_CORRUPT_EPISODE")) {
        // Fault injection for tests: "RANK:N" corrupts actor RANK's Nth episode message.
        int fault_rank = -1;
        long long nth = 0;
        if (std::sscanf(corrupt, "%d:%lld", &fault_rank, &nth) == 2 && fault_rank == rank) options.corrupt_episode = nth;
      }
      ActorLoop loop(options, transport, model, env, codec, logger);
      const ActorStats stats = loop.run();
      std::string sent_to = "[";
      for (size_t i = 0; i < stats.episodes_sent_to.size(); ++i) sent_to += (i ? ", " : "") + std::to_string(stats.episodes_sent_to[i]);
      stats_json = cat("{\"role\": \"actor\", \"rank\": ", rank, ", \"env_steps\": ", stats.env_steps,
                       ", \"episodes_sent\": ", stats.episodes_sent, ", \"episodes_sent_to\": ", sent_to, "]",
                       ", \"weight_updates_applied\": ", stats.weight_updates_applied,
                       ", \"cache_invalidations\": ", stats.cache_invalidations,
                       ", \"context_steps_rebuilt\": ", stats.context_steps_rebuilt,
                       ", \"policy_version\": ", stats.policy_version,
                       ", \"corrupt_messages_injected\": ", stats.corrupt_messages_injected, "}");
    }
    write_text(run_dir / cat("rank", rank, ".json"), stats_json + "\n");
    MPI_Comm_free(&learner_comm);
  } catch (const InvalidArgumentError& error) {
    // Every rank reads the same config and fails the same way; one says so.
    if (rank == 0) std::fprintf(stderr, "kvrl train: error: %s\n", error.what());
    exit_code = 2;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kvrl train: rank %d failed: %s\n", rank, error.what());
    // A rank that fails mid-run takes the job down instead of leaving peers waiting.
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return exit_code;
}

}  // namespace kvrl
