#include "launch/train_command.h"

#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/utils.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>

#include "actor/actor_loop.h"
#include "actor/vector_env.h"
#include "common/comm/accelerator_probe.h"
#include "common/comm/device_placement.h"
#include "common/comm/heartbeat_monitor.h"
#include "common/comm/mpi_check.h"
#include "common/comm/mpi_communicator.h"
#include "common/comm/mpi_transport.h"
#include "common/comm/mpi_weight_broadcast.h"
#include "common/support/errors.h"
#include "common/support/fault_injection.h"
#include "common/support/logger.h"
#ifdef KVRL_HAVE_NCCL
#include "common/comm/nccl_communicator.h"
#include "common/comm/nccl_weight_broadcast.h"
#endif
#include "common/support/process_signals.h"
#include "launch/command_line.h"
#include "launch/rank_liveness.h"
#include "launch/run_setup.h"
#include "launch/train_config.h"
#include "launch/train_rank.h"
#include "learner/checkpoint.h"
#include "learner/learner_loop.h"

namespace kvrl {
namespace {

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw Error("cannot write '" + path.string() + "'");
}

using Setup = TrainingSetup;

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
std::shared_ptr<Communicator> make_learner_communicator(MPI_Comm learners, c10::Device device,
                                                        const TrainConfig& config, Logger& logger) {
  const int64_t bucket_bytes = config.allreduce_bucket_bytes();
  int on_gpu = device.is_cuda() ? 1 : 0, all_on_gpu = 0, any_on_gpu = 0;
  KVRL_MPI_CHECK(MPI_Allreduce(&on_gpu, &all_on_gpu, 1, MPI_INT, MPI_MIN, learners),
                 "comparing the learners' devices");
  KVRL_MPI_CHECK(MPI_Allreduce(&on_gpu, &any_on_gpu, 1, MPI_INT, MPI_MAX, learners),
                 "comparing the learners' devices");
#ifdef KVRL_HAVE_NCCL
  if (all_on_gpu) {
    logger.info("learners average gradients with NCCL");
    return std::make_shared<NcclCommunicator>(learners, device,
                                              NcclOptions{bucket_bytes, config.nccl_timeout_s});
  }
#endif
  if (any_on_gpu) {
    logger.warn(all_on_gpu
                    ? "kvrl was built without NCCL: GPU learners average gradients over MPI, through the host"
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
  const int64_t mine[4] = {
      member ? 1 : 0, device.is_cuda() ? 1 : 0, device.is_cuda() ? device.index() : -1,
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
    const int64_t* facts = &all[4 * static_cast<size_t>(r)];
    if (facts[0] == 0) continue;
    if (facts[1] == 0) nccl_obstacle = cat("rank ", r, " acts or learns on the CPU");
    if (nccl_obstacle.empty() && !gpus.insert({facts[3], facts[2]}).second) {
      nccl_obstacle = cat("rank ", r, " shares cuda:", facts[2], " with another rank of the broadcast");
    }
  }
  if (choice == "nccl" && !nccl_obstacle.empty()) {
    throw InvalidArgumentError(
        "learner.weight_broadcast=nccl needs learner 0 and every actor on a GPU of its own, "
        "but " +
        nccl_obstacle + "; use auto, mpi_messages or mpi_broadcast");
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

// What the command line names: the config file and the overrides.
struct TrainInputs {
  std::string config_path;
  std::string resume_dir;  // empty: a fresh run
  std::vector<std::string> overrides;
};

// The first positional argument is the config file unless it is an override (has '=');
// a resumed run reads RUN_DIR/config.yaml unless a config file is named.
TrainInputs train_inputs(const TrainArguments& arguments) {
  TrainInputs inputs;
  if (arguments.resume_dir) {
    if (arguments.resume_dir->empty()) throw InvalidArgumentError("--resume needs a run directory, got ''");
    inputs.resume_dir = *arguments.resume_dir;
  }
  for (size_t i = 0; i < arguments.positional.size(); ++i) {
    const std::string& item = arguments.positional[i];
    if (i == 0 && item.find('=') == std::string::npos) {
      inputs.config_path = item;
    } else {
      inputs.overrides.push_back(item);
    }
  }
  if (!inputs.resume_dir.empty()) {
    if (!std::filesystem::is_directory(inputs.resume_dir)) {
      throw InvalidArgumentError("--resume " + inputs.resume_dir + ": no such run directory");
    }
    if (inputs.config_path.empty())
      inputs.config_path = (std::filesystem::path(inputs.resume_dir) / "config.yaml").string();
    inputs.overrides.push_back("run.dir=" + inputs.resume_dir);
  }
  if (inputs.config_path.empty()) {
    throw InvalidArgumentError(
        "train needs a config file: kvrl train CONFIG.yaml [key=value ...] or "
        "kvrl train --resume RUN_DIR [key=value ...]");
  }
  return inputs;
}

Setup prepare(const TrainInputs& arguments) {
  return prepare_training(arguments.config_path, arguments.overrides);
}

// MPI for the life of `kvrl train`, one calling thread per rank; finalised on the way out
// (a failed rank aborts the job instead, and MPI_Abort does not return).
class MpiSession {
 public:
  MpiSession() {
    int provided = 0;
    KVRL_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "initialising MPI");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

// A rank that fails mid-run says why and takes the job down instead of leaving peers waiting.
[[noreturn]] void abort_job(int rank, const std::string& role, const std::exception& error) {
  const bool environment = dynamic_cast<const EnvironmentError*>(&error) != nullptr;
  const int code = environment ? kTrainEnvironmentFailed : kTrainFailed;
  std::fprintf(stderr, "kvrl train: rank %d (%s) failed%s: %s\n", rank, role.c_str(),
               environment ? " in its environment" : "", error.what());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);  // MPI_Abort does not return; should it, the job still ends
}

// How far a rank got, for what its failure means: before `working`, every rank refuses the
// same input alike (exit 2, said once); after it, a failure takes the job down.
struct RankState {
  std::string role = "unassigned";
  bool working = false;
};

// Checks that need the number of ranks: one actor at least, and enough credit to fill a batch.
void check_world(const TrainConfig& config, int size, const std::string& config_path) {
  if (config.learners >= size) {
    throw InvalidArgumentError(
        "learners (" + std::to_string(config.learners) + ") needs at least one more rank to act, but " +
        std::to_string(size) + " rank(s) were started: run it as\n  launch/kvrl-mpirun -np " +
        std::to_string(config.learners + 2) + " build/launch/kvrl train " + config_path +
        "\n(or mpirun --allow-run-as-root --oversubscribe -np N ...), with N >= learners + 1");
  }
  const int64_t share = (config.steps_per_update + config.learners - 1) / config.learners;
  if ((size - config.learners) * config.credit_steps < share) {
    throw InvalidArgumentError("actor.credit_steps (" + std::to_string(config.credit_steps) + ") x " +
                               std::to_string(size - config.learners) +
                               " actor(s) is less than one learner's share of "
                               "learner.steps_per_update (" +
                               std::to_string(share) +
                               "): the learners could never fill a batch; raise actor.credit_steps");
  }
}

RankPlan plan_rank(const TrainConfig& config, const TrainInputs& arguments, const MpiSession& mpi) {
  RankPlan plan;
  plan.rank = mpi.rank();
  plan.size = mpi.size();
  plan.is_learner = plan.rank < config.learners;
  for (int r = 0; r < plan.size; ++r) (r < config.learners ? plan.learners : plan.actors).push_back(r);
  plan.run_dir = config.run_dir;
  plan.checkpoint_dir = (plan.run_dir / "checkpoints").string();
  plan.resuming = !arguments.resume_dir.empty();
  plan.progress_in_place = progress_in_place_from_environment();
  plan.faults = FaultPlan::from_environment(plan.rank);
  if (plan.resuming && CheckpointDirectory(plan.checkpoint_dir, 1).newest_first().empty()) {
    throw InvalidArgumentError("--resume " + arguments.resume_dir + ": no checkpoint in " +
                               plan.checkpoint_dir);
  }
  return plan;
}

// Rank 0 saves and prints the effective config; every rank learns the resume point.
void start_run_directory(const TrainConfig& config, RankPlan& plan) {
  if (plan.rank == 0) {
    std::filesystem::create_directories(plan.run_dir);
    write_text(plan.run_dir / "config.yaml", config.to_yaml());
    std::printf("kvrl train: effective config (saved to %s):\n%s", (plan.run_dir / "config.yaml").c_str(),
                config.to_yaml().c_str());
    std::fflush(stdout);
  }
  plan.resume_offset = plan.rank == 0 && plan.resuming ? newest_checkpoint_update(plan.checkpoint_dir) : 0;
  KVRL_MPI_CHECK(MPI_Bcast(&plan.resume_offset, 1, MPI_INT64_T, 0, MPI_COMM_WORLD),
                 "sharing the resume point");
}

// The rank's device from its role's config key, logged with why (a fallback as a warning).
c10::Device place_rank(const TrainConfig& config, const RankPlan& plan, Logger& logger) {
  const AcceleratorReport accelerators = probe_accelerators();
  logger.info(accelerators.summary());
  const DeviceChoice device =
      choose_device(DeviceRequest::parse(plan.is_learner ? config.learner_device : config.actor_device),
                    local_rank_from_environment(), accelerators.cuda_devices);
  if (device.fell_back) {
    logger.warn(device.reason);
  } else {
    logger.info(device.reason);
  }
  return device.device;
}

void log_roles(const TrainConfig& config, const RankPlan& plan, Logger& logger) {
  if (plan.rank != 0) return;
  logger.info(
      cat("ranks: learners 0-", config.learners - 1, ", actors ", config.learners, "-", plan.size - 1));
  // launch/kvrl-mpirun names the role of a rank that dies from this file.
  if (const char* role_map = std::getenv("KVRL_ROLE_MAP")) {
    std::string lines;
    for (int r = 0; r < plan.size; ++r) lines += cat(r, " ", r < config.learners ? "learner" : "actor", "\n");
    write_text(role_map, lines);
  }
}

// Ranks share the cores of a node: the config says how many intra-op threads each role
// gets (one by default), whatever OMP_NUM_THREADS says.
void set_threads_and_seed(const TrainConfig& config, const RankPlan& plan, Logger& logger) {
  at::set_num_threads(static_cast<int>(plan.is_learner ? config.learner_threads : config.actor_threads));
  logger.info(cat(at::get_num_threads(), " intra-op thread(s) (", plan.is_learner ? "learner" : "actor",
                  ".threads)"));
  torch::manual_seed(config.seed);
}

std::shared_ptr<ActorCritic> make_model(Setup& setup, const RankPlan& plan, c10::Device device,
                                        const std::shared_ptr<Logger>& logger) {
  return make_policy(setup, plan.is_learner, device, logger);
}

// The rank's role, from its communicators to its report; returns its exit code.
int run_rank(Setup& setup, const RankPlan& plan, RankState& state) {
  const TrainConfig& config = setup.config;
  auto logger = std::make_shared<Logger>(
      plan.rank, state.role, (plan.run_dir / cat("rank", plan.rank, ".log")).string(), config.log_level);
  const c10::Device device = place_rank(config, plan, *logger);
  log_roles(config, plan, *logger);
  set_threads_and_seed(config, plan, *logger);
  MPI_Comm learner_comm = MPI_COMM_NULL;
  KVRL_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, plan.is_learner ? 0 : 1, plan.rank, &learner_comm),
                 "splitting the learners off");
  MpiTransport transport(MPI_COMM_WORLD);
  MPI_Comm weight_comm = MPI_COMM_NULL;
  RankResources resources{config, plan,    logger,    transport, make_model(setup, plan, device, logger),
                          device, nullptr, setup.spec};
  try {
    resources.weight_broadcast =
        make_weight_broadcast(config, plan.rank == 0 || !plan.is_learner, device, &weight_comm, *logger);
  } catch (const InvalidArgumentError&) {
    state.working = false;  // every rank decided alike from the same facts: a refused config (exit 2)
    throw;
  }
  std::unique_ptr<HeartbeatMonitor> heartbeats = watch_peers(config, plan, logger);
  RankOutcome outcome;
  try {
    outcome =
        plan.is_learner
            ? run_learner_rank(resources, make_learner_communicator(learner_comm, device, config, *logger))
            : run_actor_rank(resources);
    write_text(plan.run_dir / cat("rank", plan.rank, ".json"), outcome.report_json + "\n");
    // Heartbeats stop only once every rank is past its loop; a peer lost here still ends the job.
    KVRL_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD), "waiting for every rank to finish");
  } catch (const std::exception& error) {
    // Abort before the locals unwind: the transport's destructor waits for its sends, which
    // would leave this rank silent, its error unsaid, and its peers blaming a lost peer.
    logger->error(cat("failed: ", error.what()));  // the rank's log keeps it (a Python traceback too)
    abort_job(plan.rank, state.role, error);
  }
  heartbeats.reset();
  resources.weight_broadcast.reset();
  if (weight_comm != MPI_COMM_NULL) MPI_Comm_free(&weight_comm);
  MPI_Comm_free(&learner_comm);
  return outcome.exit_code;
}

// The inputs a rank checked, when they were valid.
struct CheckedRun {
  TrainInputs arguments;
  Setup setup;
  RankPlan plan;
};

// Every rank checks its inputs, and all agree before the first collective: a rank whose
// inputs differ from the others' (a run directory on a disk of its own, a file only some
// hosts have) must not leave the others waiting in it. The lowest rank that refused its
// inputs says why; every rank then returns kTrainBadInput.
std::optional<CheckedRun> check_inputs_on_every_rank(const TrainArguments& command_line,
                                                     const MpiSession& mpi) {
  std::optional<CheckedRun> run;
  std::string refusal;
  try {
    TrainInputs arguments = train_inputs(command_line);
    Setup setup = prepare(arguments);
    check_world(setup.config, mpi.size(), arguments.config_path);
    RankPlan plan = plan_rank(setup.config, arguments, mpi);
    run = CheckedRun{std::move(arguments), std::move(setup), std::move(plan)};
  } catch (const InvalidArgumentError& error) {
    refusal = error.what();
  }
  const int own = run ? mpi.size() : mpi.rank();
  int first_refusing = mpi.size();
  KVRL_MPI_CHECK(MPI_Allreduce(&own, &first_refusing, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD),
                 "agreeing that every rank accepts its inputs");
  if (first_refusing == mpi.size()) return run;
  if (mpi.rank() == first_refusing && first_refusing == 0) {
    std::fprintf(stderr, "kvrl train: error: %s\n", refusal.c_str());
  } else if (mpi.rank() == first_refusing) {
    std::fprintf(stderr,
                 "kvrl train: error on rank %d, whose inputs differ from rank 0's (a file or directory "
                 "that is not the same on every host?): %s\n",
                 mpi.rank(), refusal.c_str());
  }
  return std::nullopt;
}

}  // namespace

int run_train(const TrainArguments& command_line) {
  MpiSession mpi;
  install_crash_reporter(mpi.rank(), "starting");
  install_stop_request_handlers();
  RankState state;
  try {
    std::optional<CheckedRun> run = check_inputs_on_every_rank(command_line, mpi);
    if (!run) return kTrainBadInput;
    state.role = run->plan.is_learner ? "learner" : "actor";
    install_crash_reporter(run->plan.rank, state.role);
    start_run_directory(run->setup.config, run->plan);
    state.working = true;
    return run_rank(run->setup, run->plan, state);
  } catch (const std::exception& error) {
    if (!state.working && dynamic_cast<const InvalidArgumentError*>(&error)) {
      // A refusal every rank reached alike from the same gathered facts; one says so.
      if (mpi.rank() == 0) std::fprintf(stderr, "kvrl train: error: %s\n", error.what());
      return kTrainBadInput;
    }
    abort_job(mpi.rank(), state.role, error);
  }
}

}  // namespace kvrl
