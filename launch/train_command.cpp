#include "launch/train_command.h"

#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <set>

#include "actor/actor_loop.h"
#include "actor/vector_env.h"
#include "common/accelerator_probe.h"
#include "common/device_placement.h"
#include "common/errors.h"
#include "common/fault_injection.h"
#include "common/logger.h"
#include "common/mpi_check.h"
#include "common/mpi_transport.h"
#include "common/mpi_weight_broadcast.h"
#ifdef KVRL_HAVE_NCCL
#include "common/nccl_communicator.h"
#endif
#include "common/process_signals.h"
#include "learner/checkpoint.h"
#include "launch/rank_report.h"
#include "launch/run_setup.h"
#include "launch/train_config.h"
#include "learner/learner_loop.h"

namespace kvrl {
namespace {

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

// The update of the newest checkpoint file in `dir` (0 when there is none): a resumed
// run's actors seed their environments and sampling from it, so they do not replay the
// episodes of the run they continue.
int64_t newest_checkpoint_update(const std::string& dir) {
  const std::vector<std::string> files = CheckpointDirectory(dir, 1).newest_first();
  if (files.empty()) return 0;
  const std::string name = std::filesystem::path(files.front()).stem().string();  // checkpoint-0000000042
  return std::stoll(name.substr(name.find('-') + 1));
}

// NCCL when every learner is on a GPU (and kvrl was built with NCCL), MPI otherwise:
// learners on mixed devices, or on CPU, average over MPI, staging GPU tensors through the
// host. A collective over the learners.
std::shared_ptr<Communicator> make_learner_communicator(MPI_Comm learners, c10::Device device, const TrainConfig& config,
                                                        Logger& logger) {
  const int64_t bucket_bytes = config.allreduce_bucket_bytes();
  int on_gpu = device.is_cuda() ? 1 : 0, all_on_gpu = 0, any_on_gpu = 0;
  KVRL_MPI_CHECK(MPI_Allreduce(&on_gpu, &all_on_gpu, 1, MPI_INT, MPI_MIN, learners), "comparing the learners' devices");
  KVRL_MPI_CHECK(MPI_Allreduce(&on_gpu, &any_on_gpu, 1, MPI_INT, MPI_MAX, learners), "comparing the learners' devices");
#ifdef KVRL_HAVE_NCCL
  if (all_on_gpu) {
    logger.info("learners average gradients with NCCL");
    return std::make_shared<NcclCommunicator>(learners, device, NcclOptions{bucket_bytes, config.nccl_timeout_s});
  }
#endif
  if (any_on_gpu) {
    logger.warn(all_on_gpu ? "kvrl was built without NCCL: GPU learners average gradients over MPI, through the host"
                           : "learners are on mixed devices: gradients are averaged over MPI, through the host");
  }
  return std::make_shared<MpiCommunicator>(learners, bucket_bytes);
}

// How learner 0 sends weights to the actors (learner.weight_broadcast): null for one MPI
// message per actor, else a collective transport over `members` (learner 0 and the
// actors), which this creates. A collective over MPI_COMM_WORLD; every rank reaches the
// same decision from the same gathered facts.
std::shared_ptr<WeightBroadcastTransport> make_weight_broadcast(const TrainConfig& config, bool member,
                                                                c10::Device device, MPI_Comm* members,
                                                                Logger& logger) {
  const std::string& choice = config.weight_broadcast;
  if (choice == "mpi_messages") return nullptr;
  // Per rank: member, on a GPU, its index, its host. NCCL refuses two ranks on one GPU.
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int host_length = 0;
  KVRL_MPI_CHECK(MPI_Get_processor_name(host, &host_length), "reading the host name");
  const int64_t mine[4] = {member ? 1 : 0, device.is_cuda() ? 1 : 0, device.is_cuda() ? device.index() : -1,
                           static_cast<int64_t>(std::hash<std::string>{}(std::string(host, host_length)) >> 1)};
  int size = 0;
  KVRL_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size), "reading the world size");
  std::vector<int64_t> all(static_cast<size_t>(4 * size));
  KVRL_MPI_CHECK(MPI_Allgather(mine, 4, MPI_INT64_T, all.data(), 4, MPI_INT64_T, MPI_COMM_WORLD),
                 "comparing the ranks' devices");
  std::string nccl_obstacle;
#ifndef KVRL_HAVE_NCCL
  nccl_obstacle = "kvrl was built without NCCL";
#endif
  std::set<std::pair<int64_t, int64_t>> gpus;
  for (int r = 0; r < size && nccl_obstacle.empty(); ++r) {
    const int64_t* facts = &all[static_cast<size_t>(4 * r)];
    if (facts[0] == 0) continue;
    if (facts[1] == 0) nccl_obstacle = cat("rank ", r, " acts or learns on the CPU");
    if (nccl_obstacle.empty() && !gpus.insert({facts[3], facts[2]}).second) {
      nccl_obstacle = cat("rank ", r, " shares cuda:", facts[2], " with another rank of the broadcast");
    }
  }
  if (choice == "nccl" && !nccl_obstacle.empty()) {
    throw InvalidArgumentError("learner.weight_broadcast=nccl needs learner 0 and every actor on a GPU of its own, "
                               "but " + nccl_obstacle + "; use auto, mpi_messages or mpi_broadcast");
  }
  if (choice == "auto" && !nccl_obstacle.empty()) {
    logger.info("weights go to the actors as MPI messages (" + nccl_obstacle + ")");
    return nullptr;
  }
  KVRL_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, 0, members),
                 "splitting off learner 0 and the actors");
  if (!member) return nullptr;
#ifdef KVRL_HAVE_NCCL
  if (choice != "mpi_broadcast") {
    logger.info("weights go to the actors by announced NCCL broadcasts into staging buffers");
    return std::make_shared<NcclWeightBroadcast>(*members, device);
  }
#endif
  logger.info("weights go to the actors by announced MPI_Ibcast broadcasts into staging buffers");
  return std::make_shared<MpiWeightBroadcast>(*members);
}

int exit_code_for(RunEnd end) {
  switch (end) {
    case RunEnd::kFinished: return kTrainFinished;
    case RunEnd::kInterrupted: return kTrainInterrupted;
    case RunEnd::kNonFinite: return kTrainNonFinite;
  }
  return kTrainFailed;
}

// `[CONFIG.yaml] [--resume RUN_DIR] [key=value ...]`.
struct TrainArguments {
  std::string config_path;
  std::string resume_dir;  // empty: a fresh run
  std::vector<std::string> overrides;
};

TrainArguments parse_arguments(const std::vector<std::string>& args) {
  TrainArguments parsed;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--resume") {
      if (i + 1 >= args.size() || args[i + 1].empty()) throw InvalidArgumentError("--resume needs a run directory");
      parsed.resume_dir = args[++i];
    } else if (args[i].rfind("--", 0) == 0) {
      throw InvalidArgumentError("unknown option '" + args[i] + "' (train takes --resume RUN_DIR)");
    } else if (i == 0 && args[i].find('=') == std::string::npos) {
      parsed.config_path = args[i];
    } else {
      parsed.overrides.push_back(args[i]);
    }
  }
  if (!parsed.resume_dir.empty()) {
    if (!std::filesystem::is_directory(parsed.resume_dir)) {
      throw InvalidArgumentError("--resume " + parsed.resume_dir + ": no such run directory");
    }
    if (parsed.config_path.empty()) parsed.config_path = (std::filesystem::path(parsed.resume_dir) / "config.yaml").string();
    parsed.overrides.push_back("run.dir=" + parsed.resume_dir);
  }
  if (parsed.config_path.empty()) {
    throw InvalidArgumentError("train needs a config file: kvrl train CONFIG.yaml [key=value ...] or "
                               "kvrl train --resume RUN_DIR [key=value ...]");
  }
  return parsed;
}

Setup prepare(const TrainArguments& arguments) {
  Setup setup;
  setup.config = TrainConfig::load(arguments.config_path, arguments.overrides);
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
  install_crash_reporter(rank, "starting");
  install_stop_request_handlers();
  int exit_code = kTrainFinished;
  std::string role = "unassigned";
  bool working = false;  // past the checks every rank makes alike
  try {
    const TrainArguments arguments = parse_arguments(args);
    Setup setup = prepare(arguments);
    TrainConfig& config = setup.config;
    if (config.learners >= size) {
      throw InvalidArgumentError(
          "learners (" + std::to_string(config.learners) + ") needs at least one more rank to act, but " +
          std::to_string(size) + " rank(s) were started: run it as\n  launch/kvrl-mpirun -np " +
          std::to_string(config.learners + 2) + " build/launch/kvrl train " + arguments.config_path +
          "\n(or mpirun --allow-run-as-root --oversubscribe -np N ...), with N >= learners + 1");
    }
    const int64_t share = (config.steps_per_update + config.learners - 1) / config.learners;
    if ((size - config.learners) * config.credit_steps < share) {
      throw InvalidArgumentError("actor.credit_steps (" + std::to_string(config.credit_steps) + ") x " +
                                 std::to_string(size - config.learners) + " actor(s) is less than one learner's share of "
                                 "learner.steps_per_update (" + std::to_string(share) +
                                 "): the learners could never fill a batch; raise actor.credit_steps");
    }
    const FaultPlan faults = FaultPlan::from_environment(rank);
    const bool progress_in_place = progress_in_place_from_environment();
    const bool is_learner = rank < config.learners;
    role = is_learner ? "learner" : "actor";
    install_crash_reporter(rank, role);
    const std::filesystem::path run_dir = config.run_dir;
    const std::string checkpoint_dir = (run_dir / "checkpoints").string();
    const bool resuming = !arguments.resume_dir.empty();
    if (resuming && CheckpointDirectory(checkpoint_dir, 1).newest_first().empty()) {
      throw InvalidArgumentError("--resume " + arguments.resume_dir + ": no checkpoint in " + checkpoint_dir);
    }
    if (rank == 0) {
      std::filesystem::create_directories(run_dir);
      write_text(run_dir / "config.yaml", config.to_yaml());
      std::printf("kvrl train: effective config (saved to %s):\n%s", (run_dir / "config.yaml").c_str(),
                  config.to_yaml().c_str());
      std::fflush(stdout);
    }
    working = true;
    int64_t resume_offset = rank == 0 && resuming ? newest_checkpoint_update(checkpoint_dir) : 0;
    KVRL_MPI_CHECK(MPI_Bcast(&resume_offset, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "sharing the resume point");
    auto logger = std::make_shared<Logger>(rank, role, (run_dir / cat("rank", rank, ".log")).string(),
                                           config.log_level);
    const AcceleratorReport accelerators = probe_accelerators();
    logger->info(accelerators.summary());
    const DeviceChoice device = choose_device(DeviceRequest::parse(is_learner ? config.learner_device : config.actor_device),
                                              local_rank_from_environment(), accelerators.cuda_devices);
    if (device.fell_back) {
      logger->warn(device.reason);
    } else {
      logger->info(device.reason);
    }
    if (rank == 0) {
      logger->info(cat("ranks: learners 0-", config.learners - 1, ", actors ", config.learners, "-", size - 1));
      // launch/kvrl-mpirun names the role of a rank that dies from this file.
      if (const char* role_map = std::getenv("KVRL_ROLE_MAP")) {
        std::string lines;
        for (int r = 0; r < size; ++r) lines += cat(r, " ", r < config.learners ? "learner" : "actor", "\n");
        write_text(role_map, lines);
      }
    }
    // Ranks share the cores of a node: the config says how many intra-op threads each role
    // gets (one by default), whatever OMP_NUM_THREADS says.
    at::set_num_threads(static_cast<int>(is_learner ? config.learner_threads : config.actor_threads));
    logger->info(cat(at::get_num_threads(), " intra-op thread(s) (", is_learner ? "learner" : "actor", ".threads)"));
    torch::manual_seed(config.seed);

    MPI_Comm learner_comm = MPI_COMM_NULL;
    KVRL_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, is_learner ? 0 : 1, rank, &learner_comm),
                   "splitting the learners off");
    Roles roles;
    for (int r = 0; r < size; ++r) (r < config.learners ? roles.learners : roles.actors).push_back(r);
    MpiTransport transport(MPI_COMM_WORLD);
    setup.model.transformer.warn = [logger](const std::string& message) { logger->warn(message); };
    auto model = std::make_shared<ActorCritic>(setup.model);
    model->to(device.device);
    if ((is_learner ? config.learner_autocast : config.actor_autocast) == "bfloat16") {
      model->set_autocast(at::kBFloat16);
      logger->info(cat(is_learner ? "the window forward runs" : "steps and caches run", " under bfloat16 autocast on ",
                       device.device.str()));
    }
    MPI_Comm weight_comm = MPI_COMM_NULL;
    std::shared_ptr<WeightBroadcastTransport> weight_broadcast;
    try {
      weight_broadcast = make_weight_broadcast(config, rank == 0 || !is_learner, device.device, &weight_comm, *logger);
    } catch (const InvalidArgumentError&) {
      working = false;  // every rank decided alike from the same facts: a refused config (exit 2)
      throw;
    }
    const EpisodeCodec codec(setup.spec);
    std::string stats_json;
    if (is_learner) {
      auto communicator = make_learner_communicator(learner_comm, device.device, config, *logger);
      Learner learner(model, config.learner_options(), communicator);
      LearnerLoopOptions options;
      if (resuming) {
        const auto check_config = [&](const std::string& yaml) {
          const std::string difference = config.model_difference(TrainConfig::parse(yaml, {}));
          if (!difference.empty()) throw InvalidArgumentError(difference);
        };
        auto [path, contents] = CheckpointDirectory(checkpoint_dir, config.checkpoint_keep)
                                    .restore_newest(learner, *logger, check_config);
        options.resumed = contents.progress;
        // Learners restore independently; they must agree on where they start.
        const double update = static_cast<double>(options.resumed.updates);
        if (communicator->all_reduce_sum(update) != update * config.learners) {
          throw Error("the learners restored checkpoints of different updates; is " + checkpoint_dir +
                      " the same directory on every node?");
        }
        logger->info(cat("resumed from ", path, ": update ", options.resumed.updates, ", policy version ",
                         options.resumed.policy_version, ", env steps ", options.resumed.env_steps,
                         "; episodes in flight when it was written were dropped then (", options.resumed.dropped.size(),
                         " reasons counted in the checkpoint)"));
      }
      options.actor_ranks = roles.actors;
      options.total_env_steps = config.total_env_steps;
      options.max_updates = config.max_updates;
      options.steps_per_update = config.steps_per_update;
      options.weight_sync_interval = config.weight_sync_interval;
      options.max_policy_lag = config.max_policy_lag;
      options.log_interval_s = config.log_interval_s;
      if (rank == 0) {
        RunReporterOptions reporting;
        reporting.run_dir = run_dir.string();
        reporting.continuing = resuming;
        reporting.status_address = config.status_address;
        reporting.status_port = static_cast<int>(config.status_port);
        reporting.progress_in_place = progress_in_place;
        options.reporter = std::make_shared<RunReporter>(
            reporting, RunIdentity{config.to_yaml(), config.learner.algorithm, size, roles.learners, roles.actors},
            logger);
      }
      options.checkpoint_dir = checkpoint_dir;
      options.checkpoint_interval_updates = config.checkpoint_interval_updates;
      options.checkpoint_interval_s = config.checkpoint_interval_s;
      options.checkpoint_keep = config.checkpoint_keep;
      options.config_yaml = config.to_yaml();
      options.max_consecutive_skips = config.max_consecutive_skips;
      options.faults = faults;
      options.weight_broadcast = weight_broadcast;
      options.weight_broadcast_timeout_s = config.nccl_timeout_s;
      LearnerLoop loop(options, transport, communicator, learner, codec, logger);
      const LearnerStats stats = loop.run();
      exit_code = exit_code_for(stats.end);
      stats_json = learner_report_json(
          rank, stats,
          {options.resumed.updates, learner.allreduce_buckets(), learner.allreduce_buckets_during_backward()},
          exit_code);
      if (rank == 0) {
        logger->info(cat("lag min/mean/max ", stats.lag_min, "/", stats.lag_mean, "/", stats.lag_max,
                         ", dropped ", drop_counts_json(stats)));
        const std::string resume_hint =
            "; resume from " + stats.last_checkpoint + " with: kvrl train --resume " + run_dir.string();
        if (stats.end == RunEnd::kInterrupted) {
          std::printf("kvrl train: interrupted (%s) at update %lld%s\n", stats.end_reason.c_str(),
                      static_cast<long long>(stats.updates), resume_hint.c_str());
        } else if (stats.end == RunEnd::kNonFinite) {
          std::fprintf(stderr, "kvrl train: stopped: %s%s (after fixing the cause, e.g. a lower learning rate)\n",
                       stats.end_reason.c_str(), resume_hint.c_str());
        }
        std::printf("kvrl train: %s: env_steps=%lld updates=%lld mean_return=%.2f wall_time=%.1fs\n",
                    stats.end == RunEnd::kFinished ? "finished" : "stopped", static_cast<long long>(stats.env_steps),
                    static_cast<long long>(stats.updates), stats.mean_return, stats.wall_seconds);
      }
    } else {
      std::vector<std::unique_ptr<Environment>> envs;
      for (int64_t i = 0; i < config.num_envs; ++i) envs.push_back(make_configured_env(config));
      const uint64_t seed = static_cast<uint64_t>(config.seed) + static_cast<uint64_t>(resume_offset) * 1000003;
      VectorEnv env(std::move(envs), seed * 7919 + static_cast<uint64_t>(rank));
      ActorLoopOptions options;
      options.learner_ranks = roles.learners;
      options.credit_steps = config.credit_steps;
      options.keep_context_on_update = config.keep_context_on_update;
      options.seed = seed;
      options.device = device.device;
      options.faults = faults;
      options.weight_broadcast = weight_broadcast;
      options.weight_broadcast_timeout_s = config.nccl_timeout_s;
      ActorLoop loop(options, transport, model, env, codec, logger);
      const ActorStats stats = loop.run();
      exit_code = exit_code_for(stats.end);
      stats_json = actor_report_json(rank, stats, exit_code);
    }
    write_text(run_dir / cat("rank", rank, ".json"), stats_json + "\n");
    weight_broadcast.reset();
    if (weight_comm != MPI_COMM_NULL) MPI_Comm_free(&weight_comm);
    MPI_Comm_free(&learner_comm);
  } catch (const std::exception& error) {
    if (!working && dynamic_cast<const InvalidArgumentError*>(&error)) {
      // Every rank reads the same config and fails the same way; one says so.
      if (rank == 0) std::fprintf(stderr, "kvrl train: error: %s\n", error.what());
      MPI_Finalize();
      return kTrainBadInput;
    }
    std::fprintf(stderr, "kvrl train: rank %d (%s) failed: %s\n", rank, role.c_str(), error.what());
    // A rank that fails mid-run takes the job down instead of leaving peers waiting.
    MPI_Abort(MPI_COMM_WORLD, kTrainFailed);
  }
  MPI_Finalize();
  return exit_code;
}

}  // namespace kvrl
