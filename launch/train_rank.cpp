#include "launch/train_rank.h"

#include <cstdio>
#include <optional>

#include "actor/actor_loop.h"
#include "actor/vector_env.h"
#include "common/comm/remote_actor_server.h"
#include "common/support/errors.h"
#include "common/support/logger.h"
#include "launch/rank_report.h"
#include "launch/run_setup.h"
#include "launch/train_command.h"
#include "learner/checkpoint.h"
#include "learner/learner_loop.h"

namespace kvrl {
namespace {

int exit_code_for(RunEnd end) {
  switch (end) {
    case RunEnd::kFinished:
      return kTrainFinished;
    case RunEnd::kInterrupted:
      return kTrainInterrupted;
    case RunEnd::kNonFinite:
      return kTrainNonFinite;
  }
  return kTrainFailed;
}

// Restores the newest usable checkpoint into `learner`; returns where the run continues.
TrainingProgress restore(const RankResources& rank, Learner& learner, Communicator& communicator) {
  const TrainConfig& config = rank.config;
  const auto check_config = [&](const std::string& yaml) {
    const std::string difference = config.model_difference(TrainConfig::parse(yaml, {}));
    if (!difference.empty()) throw InvalidArgumentError(difference);
  };
  auto [path, contents] = CheckpointDirectory(rank.plan.checkpoint_dir, config.checkpoint_keep)
                              .restore_newest(learner, *rank.logger, check_config);
  const TrainingProgress& resumed = contents.progress;
  // Learners restore independently; they must agree on where they start.
  const double update = static_cast<double>(resumed.updates);
  if (communicator.all_reduce_sum(update) != update * config.learners) {
    throw Error("the learners restored checkpoints of different updates; is " + rank.plan.checkpoint_dir +
                " the same directory on every node?");
  }
  rank.logger->info(cat("resumed from ", path, ": update ", resumed.updates, ", policy version ",
                        resumed.policy_version, ", env steps ", resumed.env_steps,
                        "; episodes in flight when it was written were dropped then (",
                        resumed.dropped.size(), " reasons counted in the checkpoint)"));
  return resumed;
}

// Learner 0 reports progress, metrics and status; the others report nothing.
std::shared_ptr<RunReporter> make_reporter(const RankResources& rank) {
  if (rank.plan.rank != 0) return nullptr;
  const TrainConfig& config = rank.config;
  RunReporterOptions reporting;
  reporting.run_dir = rank.plan.run_dir.string();
  reporting.continuing = rank.plan.resuming;
  reporting.status_address = config.status_address;
  reporting.status_port = static_cast<int>(config.status_port);
  reporting.progress_in_place = rank.plan.progress_in_place;
  return std::make_shared<RunReporter>(reporting,
                                       RunIdentity{config.to_yaml(), config.learner.algorithm, rank.plan.size,
                                                   rank.plan.learners, rank.plan.actors},
                                       rank.logger);
}

LearnerLoopOptions learner_loop_options(const RankResources& rank, const TrainingProgress& resumed) {
  const TrainConfig& config = rank.config;
  LearnerLoopOptions options;
  options.resumed = resumed;
  options.actor_ranks = rank.plan.actors;
  options.total_env_steps = config.total_env_steps;
  options.max_updates = config.max_updates;
  options.steps_per_update = config.steps_per_update;
  options.weight_sync_interval = config.weight_sync_interval;
  options.max_policy_lag = config.max_policy_lag;
  options.credit_return =
      config.credit_return == "when_trained" ? CreditReturn::kWhenTrained : CreditReturn::kWhenBatched;
  options.log_interval_s = config.log_interval_s;
  options.reporter = make_reporter(rank);
  options.checkpoint_dir = rank.plan.checkpoint_dir;
  options.checkpoint_interval_updates = config.checkpoint_interval_updates;
  options.checkpoint_interval_s = config.checkpoint_interval_s;
  options.checkpoint_keep = config.checkpoint_keep;
  options.config_yaml = config.to_yaml();
  options.max_consecutive_skips = config.max_consecutive_skips;
  options.faults = rank.plan.faults;
  options.weight_broadcast = rank.weight_broadcast;
  options.weight_broadcast_timeout_s = config.nccl_timeout_s;
  return options;
}

// Learner 0's last words: the lag and drops in its log, how to resume when the run
// stopped early, and the summary line.
void print_summary(const RankResources& rank, const LearnerStats& stats) {
  rank.logger->info(cat("lag min/mean/max ", stats.lag_min, "/", stats.lag_mean, "/", stats.lag_max,
                        ", dropped ", drop_counts_json(stats)));
  const std::string resume_hint =
      "; resume from " + stats.last_checkpoint + " with: kvrl train --resume " + rank.plan.run_dir.string();
  if (stats.end == RunEnd::kInterrupted) {
    std::printf("kvrl train: interrupted (%s) at update %lld%s\n", stats.end_reason.c_str(),
                static_cast<long long>(stats.updates), resume_hint.c_str());
  } else if (stats.end == RunEnd::kNonFinite) {
    std::fprintf(stderr, "kvrl train: stopped: %s%s (after fixing the cause, e.g. a lower learning rate)\n",
                 stats.end_reason.c_str(), resume_hint.c_str());
  }
  std::printf("kvrl train: %s: env_steps=%lld updates=%lld mean_return=%.2f wall_time=%.1fs\n",
              stats.end == RunEnd::kFinished ? "finished" : "stopped",
              static_cast<long long>(stats.env_steps), static_cast<long long>(stats.updates),
              stats.mean_return, stats.wall_seconds);
}

ActorLoopOptions actor_loop_options(const RankResources& rank, uint64_t seed) {
  ActorLoopOptions options = actor_loop_options(rank.config, rank.plan.learners, rank.device, seed);
  options.faults = rank.plan.faults;
  options.weight_broadcast = rank.weight_broadcast;
  return options;
}

// Learner 0's door for remote actors (remote.port), or null.
std::unique_ptr<RemoteActorServer> open_remote_door(const RankResources& rank) {
  const TrainConfig& config = rank.config;
  if (rank.plan.rank != 0 || config.remote_port == 0) return nullptr;
  RemoteActorServerOptions options;
  options.address = config.remote_address;
  options.port = static_cast<int>(config.remote_port);
  options.token = read_token_file(config.remote_token_file);
  options.config_hash = config.actor_identity_hash();
  options.first_actor_id = rank.plan.size;
  options.max_connections = static_cast<int>(config.remote_max_actors);
  options.max_frame_bytes = remote_frame_limit(rank.spec, rank.model->parameters());
  options.max_queued_bytes = 4 * options.max_frame_bytes;
  auto server = std::make_unique<RemoteActorServer>(options, rank.logger);
  rank.logger->info(cat("remote actors may join at ", config.remote_address, ":", server->port(),
                        " (kvrl actor CONFIG --connect HOST:PORT --token-file FILE)"));
  return server;
}

}  // namespace

RankOutcome run_learner_rank(const RankResources& rank, const std::shared_ptr<Communicator>& communicator) {
  LearnerOptions options = rank.config.learner_options();
  options.max_window_tokens = rank.spec.max_context + rank.spec.max_length + 1;
  Learner learner(rank.model, options, communicator);
  const TrainingProgress resumed =
      rank.plan.resuming ? restore(rank, learner, *communicator) : TrainingProgress{};
  const std::unique_ptr<RemoteActorServer> remote = open_remote_door(rank);
  std::optional<ElasticTransport> elastic;
  if (remote) elastic.emplace(rank.transport, *remote);
  LearnerLoop loop(learner_loop_options(rank, resumed), elastic ? *elastic : rank.transport, communicator,
                   learner, EpisodeCodec(rank.spec), rank.logger);
  LearnerStats stats = loop.run();
  if (remote) stats.remote_connections = remote->counters();
  RankOutcome outcome;
  outcome.exit_code = exit_code_for(stats.end);
  outcome.report_json = learner_report_json(
      rank.plan.rank, this_rank_placement(rank.device.str()), stats,
      {resumed.updates, learner.allreduce_buckets(), learner.allreduce_buckets_during_backward()},
      outcome.exit_code);
  if (rank.plan.rank == 0) print_summary(rank, stats);
  return outcome;
}

RankOutcome run_actor_rank(const RankResources& rank) {
  // A resumed run's actors seed from the checkpoint's update, so they do not replay the
  // episodes of the run they continue.
  const uint64_t seed =
      static_cast<uint64_t>(rank.config.seed) + static_cast<uint64_t>(rank.plan.resume_offset) * 1000003;
  const std::unique_ptr<VectorEnv> env = make_configured_vector_env(
      rank.config, rank.config.num_envs, seed * 7919 + static_cast<uint64_t>(rank.plan.rank));
  ActorLoop loop(actor_loop_options(rank, seed), rank.transport, rank.model, *env, EpisodeCodec(rank.spec),
                 rank.logger);
  const ActorStats stats = loop.run();
  RankOutcome outcome;
  outcome.exit_code = exit_code_for(stats.end);
  outcome.report_json =
      actor_report_json(rank.plan.rank, this_rank_placement(rank.device.str()), stats, outcome.exit_code);
  return outcome;
}

ActorLoopOptions actor_loop_options(const TrainConfig& config, std::vector<int> learners, c10::Device device,
                                    uint64_t seed) {
  ActorLoopOptions options;
  options.learner_ranks = std::move(learners);
  options.credit_steps = config.credit_steps;
  const std::string& policy = config.on_weight_update;
  options.on_weight_update = policy == "restart" ? WeightUpdatePolicy::kRestart
                             : policy == "keep"  ? WeightUpdatePolicy::kKeep
                                                 : WeightUpdatePolicy::kReprefill;
  const ContextPlan plan = context_plan(config);
  options.fragment_steps = config.fragment_steps;
  options.collect = config.collect == "batches" ? Collection::kBatches : Collection::kEpisodes;
  options.segment_steps = plan.segment_steps;
  options.context_reach = plan.reach;
  options.seed = seed;
  options.device = device;
  options.weight_broadcast_timeout_s = config.nccl_timeout_s;
  return options;
}

}  // namespace kvrl
