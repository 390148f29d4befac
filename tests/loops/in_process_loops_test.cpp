// ActorLoop and LearnerLoop as threads of this process over InProcessTransport: the
// wiring of a run (credit, weights, drops, stop and drain) tested without mpiexec, on the
// same encoded messages MPI would carry. CueRecallTMaze keeps episodes short (a dozen
// steps) so that each run takes a second or two.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "actor/actor_loop.h"
#include "actor/env_registry.h"
#include "actor/policy_fit.h"
#include "actor/vector_env.h"
#include "common/comm/in_process_transport.h"
#include "common/comm/local_communicator.h"
#include "common/support/errors.h"
#include "common/support/logger.h"
#include "learner/learner.h"
#include "learner/learner_loop.h"

namespace kvrl {
namespace {

constexpr int kLearnerRank = 0;
const char* const kEnvName = "CueRecallTMaze";
const EnvOptions kEnvOptions = {{"corridor_length", 6}};

struct RunPlan {
  int actors = 2;
  int64_t envs_per_actor = 4;
  int64_t total_env_steps = 1200;
  int64_t steps_per_update = 240;
  int64_t credit_steps = 240;
  int64_t weight_sync_interval = 1;
  int64_t max_policy_lag = 0;
  CreditReturn credit_return = CreditReturn::kWhenBatched;
  Collection collect = Collection::kEpisodes;
  int64_t epochs = 2;
  size_t inbox_bound = 8;
  int64_t corrupt_episode_of_first_actor = 0;  // FaultPlan::corrupt_episode, 0 = none
};

struct RunOutcome {
  LearnerStats learner;
  std::vector<ActorStats> actors;
  std::vector<std::string> actor_checksums;  // parameter_checksum of each actor's model
  std::string initial_checksum;              // the learner's before its first update
};

ActorCriticOptions policy_for(const Environment& env) {
  ActorCriticOptions options;
  const PolicyShape shape = policy_shape_for(env.observation_space(), env.action_space());
  options.transformer.input_size = env.observation_space().flat_size();
  options.transformer.hidden_size = 16;
  options.transformer.num_layers = 1;
  options.transformer.num_heads = 2;
  options.transformer.max_seq_len = env.time_limit() + 1;
  options.discrete = shape.discrete;
  options.num_outputs = shape.num_outputs;
  return options;
}

std::shared_ptr<Logger> quiet_logger(int rank, const std::string& role) {
  return std::make_shared<Logger>(rank, role, "", "error");
}

ActorStats run_actor(const RunPlan& plan, InProcessNetwork& network, int rank, const EpisodeCodec& codec,
                     std::shared_ptr<ActorCritic> model) {
  InProcessTransport transport(network, rank);
  std::vector<std::unique_ptr<Environment>> envs;
  for (int64_t i = 0; i < plan.envs_per_actor; ++i) envs.push_back(make_environment(kEnvName, kEnvOptions));
  NativeVectorEnv env(std::move(envs), 17 + static_cast<uint64_t>(rank));
  ActorLoopOptions options;
  options.learner_ranks = {kLearnerRank};
  options.credit_steps = plan.credit_steps;
  options.collect = plan.collect;
  options.seed = 5;
  if (rank == 1) options.faults.corrupt_episode = plan.corrupt_episode_of_first_actor;
  ActorLoop loop(options, transport, std::move(model), env, codec, quiet_logger(rank, "actor"));
  return loop.run();
}

LearnerStats run_learner(const RunPlan& plan, InProcessNetwork& network, const EpisodeCodec& codec,
                         const ActorCriticOptions& policy, std::string& initial_checksum) {
  torch::manual_seed(1);
  auto model = std::make_shared<ActorCritic>(policy);
  initial_checksum = parameter_checksum(model->parameters());
  LearnerOptions learning;
  learning.epochs = plan.epochs;
  learning.minibatches = 2;
  Learner learner(model, learning, std::make_shared<LocalCommunicator>());
  InProcessTransport transport(network, kLearnerRank);
  LearnerLoopOptions options;
  for (int a = 0; a < plan.actors; ++a) options.actor_ranks.push_back(a + 1);
  options.total_env_steps = plan.total_env_steps;
  options.steps_per_update = plan.steps_per_update;
  options.weight_sync_interval = plan.weight_sync_interval;
  options.max_policy_lag = plan.max_policy_lag;
  options.credit_return = plan.credit_return;
  LearnerLoop loop(options, transport, std::make_shared<LocalCommunicator>(), learner, codec,
                   quiet_logger(kLearnerRank, "learner"));
  return loop.run();
}

// Runs one learner (rank 0) on this thread and the actors (ranks 1..) on threads of their
// own, each with a model of its own, and rethrows the first failure of any of them.
RunOutcome run_in_process(const RunPlan& plan) {
  at::set_num_threads(1);
  torch::manual_seed(1);
  const std::unique_ptr<Environment> prototype = make_environment(kEnvName, kEnvOptions);
  const ActorCriticOptions policy = policy_for(*prototype);
  const EpisodeCodec codec({prototype->observation_space().flat_size(), prototype->action_space().flat_size(),
                            prototype->time_limit(), /*max_context=*/0, /*streams=*/plan.envs_per_actor});
  InProcessNetwork network(plan.actors + 1, plan.inbox_bound, /*flush_timeout_s=*/20);

  RunOutcome outcome;
  std::vector<std::shared_ptr<ActorCritic>> actor_models;
  for (int a = 0; a < plan.actors; ++a) {
    torch::manual_seed(100 + a);  // actors start from other weights than the learner's
    actor_models.push_back(std::make_shared<ActorCritic>(policy));
  }
  // A participant that fails closes the network, so the others fail too instead of
  // waiting; the first failure is the one reported.
  std::mutex failure_mutex;
  std::exception_ptr first_failure;
  const auto guarded = [&](const std::function<void()>& work) {
    try {
      work();
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!first_failure) first_failure = std::current_exception();
      network.close();
    }
  };
  outcome.actors.resize(static_cast<size_t>(plan.actors));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(plan.actors));
  for (int a = 0; a < plan.actors; ++a) {
    threads.emplace_back(guarded, [&, a] {
      outcome.actors[static_cast<size_t>(a)] = run_actor(plan, network, a + 1, codec, actor_models[a]);
    });
  }
  guarded([&] { outcome.learner = run_learner(plan, network, codec, policy, outcome.initial_checksum); });
  for (std::thread& thread : threads) thread.join();
  if (first_failure) std::rethrow_exception(first_failure);
  for (const auto& model : actor_models)
    outcome.actor_checksums.push_back(parameter_checksum(model->parameters()));
  return outcome;
}

int64_t dropped_total(const LearnerStats& stats) {
  int64_t total = 0;
  for (const auto& [reason, count] : stats.dropped) total += count;
  return total;
}

// Every episode an actor sent reached the learner, and each was used or dropped with a reason.
void expect_every_episode_accounted_for(const RunOutcome& run) {
  int64_t sent = 0;
  for (size_t a = 0; a < run.actors.size(); ++a) {
    const int rank = static_cast<int>(a) + 1;
    const ActorStats& actor = run.actors[a];
    sent += actor.episodes_sent;
    EXPECT_EQ(run.learner.announced_by.at(rank), actor.episodes_sent) << "actor rank " << rank;
    EXPECT_EQ(run.learner.received_from.count(rank) ? run.learner.received_from.at(rank) : 0,
              actor.episodes_sent)
        << "actor rank " << rank;
  }
  EXPECT_EQ(run.learner.episodes_received, sent);
  EXPECT_EQ(run.learner.episodes_used + dropped_total(run.learner), sent);
}

TEST(InProcessLoops, OneLearnerAndTwoActorsTrainAndEveryEpisodeIsAccountedFor) {
  const RunPlan plan;
  const RunOutcome run = run_in_process(plan);
  EXPECT_GE(run.learner.updates, plan.total_env_steps / plan.steps_per_update);
  EXPECT_GE(run.learner.env_steps, plan.total_env_steps);
  EXPECT_NE(run.learner.parameter_checksum, run.initial_checksum)
      << "the updates left the parameters unchanged";
  EXPECT_EQ(run.learner.end, RunEnd::kFinished);
  for (const ActorStats& actor : run.actors) {
    EXPECT_GT(actor.episodes_sent, 0);
    EXPECT_GT(actor.weight_updates_applied, 0);
    EXPECT_EQ(actor.end, RunEnd::kFinished);
  }
  expect_every_episode_accounted_for(run);
}

// Learner 0 sends weights after every update, and before its stop: every actor ends with
// exactly the learner's parameters, although each started from weights of its own.
TEST(InProcessLoops, AfterTheLastWeightSyncEveryActorHoldsTheLearnersParameters) {
  const RunOutcome run = run_in_process(RunPlan{});
  ASSERT_EQ(run.actor_checksums.size(), 2u);
  for (size_t a = 0; a < run.actor_checksums.size(); ++a) {
    EXPECT_EQ(run.actor_checksums[a], run.learner.parameter_checksum) << "actor rank " << a + 1;
    EXPECT_EQ(run.actors[a].policy_version, run.learner.updates) << "actor rank " << a + 1;
  }
}

// A learner ten times slower per update than its batch takes to collect: actors wait for
// credit instead of piling episodes up. An actor may overdraw its credit by one episode
// (actor/actor_loop.cpp), so the learner's queue never holds more than credit plus a time
// limit per actor. Inboxes of 3 messages make sends wait in their outboxes on the way.
TEST(InProcessLoops, FlowControlBoundsTheLearnersQueueByTheCreditItGaveOut) {
  RunPlan plan;
  plan.epochs = 10;
  plan.credit_steps = 60;
  plan.steps_per_update = 120;
  plan.inbox_bound = 3;
  const int64_t time_limit = make_environment(kEnvName, kEnvOptions)->time_limit();
  const RunOutcome run = run_in_process(plan);
  EXPECT_LE(run.learner.queued_steps_high_water, plan.actors * (plan.credit_steps + time_limit));
  EXPECT_GE(run.learner.queued_steps_high_water, plan.steps_per_update) << "the learner never held a batch";
  // Credit, not the learner's budget, bounds what the actors collect ahead of the learner:
  // what it trained on, plus per actor its credit, one overdrawn episode and its open
  // episodes (a learner 10x slower than collection would otherwise be far behind).
  int64_t collected = 0;
  for (const ActorStats& actor : run.actors) collected += actor.env_steps;
  EXPECT_LE(collected, run.learner.env_steps +
                           plan.actors * (plan.credit_steps + time_limit + plan.envs_per_actor * time_limit));
  expect_every_episode_accounted_for(run);
}

// A learner ten times slower than collection, and credit of one batch over the actors.
// Returned as the batch is taken, the credit lets the actors collect the whole next batch
// on the weights the learner is about to replace, so nearly every episode lags by one
// version or more. Returned after the update and its weights, it makes the actors wait for
// those weights: only the episodes still open when an actor ran out of credit lag at all.
TEST(InProcessLoops, CreditReturnedWhenTrainedMakesActorsActOnTheNewestWeights) {
  RunPlan plan;
  plan.epochs = 10;
  plan.credit_steps = 120;
  plan.steps_per_update = 240;
  plan.total_env_steps = 2400;
  const RunOutcome batched = run_in_process(plan);
  plan.credit_return = CreditReturn::kWhenTrained;
  const RunOutcome trained = run_in_process(plan);
  // Measured: 0.78-0.86 against 0.14-0.16 (the first update's batch lags by 0 in both).
  EXPECT_GT(batched.learner.lag_mean, 0.6);
  EXPECT_LT(trained.learner.lag_mean, 0.3);
  EXPECT_EQ(trained.learner.end, RunEnd::kFinished);
  expect_every_episode_accounted_for(trained);
}

// Batches (TorchRL's collector): each actor acts exactly its credit, 120 steps, on the newest
// weights, cuts what is open into fragments and ships it all; with the credit returned after
// each update, every update trains on exactly one batch of 240 steps, each step acted by the
// weights being trained (lag 0), and nothing is lost.
TEST(InProcessLoops, BatchesReturnedWhenTrainedTrainEveryStepOnTheWeightsThatActedIt) {
  RunPlan plan;
  plan.collect = Collection::kBatches;
  plan.credit_return = CreditReturn::kWhenTrained;
  plan.credit_steps = 120;
  plan.steps_per_update = 240;
  const RunOutcome run = run_in_process(plan);
  EXPECT_EQ(run.learner.end, RunEnd::kFinished);
  EXPECT_GE(run.learner.updates, 5);
  EXPECT_EQ(run.learner.env_steps, run.learner.updates * plan.steps_per_update);
  EXPECT_EQ(run.learner.lag_max, 0);
  int64_t fragments = 0;
  for (const ActorStats& actor : run.actors) fragments += actor.fragments_continuing;
  EXPECT_GT(fragments, 0) << "no batch ended inside an episode";
  expect_every_episode_accounted_for(run);
}

// Weights reach the actors every 3rd update and episodes may lag by 2 versions at most:
// those still in flight or queued when the learner moves 3 versions past their policy are
// dropped, counted under their reason, and none over the limit is trained on.
TEST(InProcessLoops, EpisodesOlderThanMaxPolicyLagAreDroppedAndCounted) {
  RunPlan plan;
  plan.weight_sync_interval = 3;
  plan.max_policy_lag = 2;
  plan.credit_steps = 480;
  plan.total_env_steps = 2400;
  const RunOutcome run = run_in_process(plan);
  ASSERT_TRUE(run.learner.dropped.count("policy_lag")) << "no episode was dropped for its lag";
  EXPECT_GT(run.learner.dropped.at("policy_lag"), 0);
  EXPECT_LE(run.learner.lag_max, plan.max_policy_lag) << "an episode over the lag limit was used";
  expect_every_episode_accounted_for(run);
}

// A limit below weight_sync_interval - 1 would drop every episode until a sync that never
// comes: refused up front, naming both keys.
TEST(InProcessLoops, AMaxPolicyLagTheWeightSyncCannotMeetIsRefused) {
  RunPlan plan;
  plan.weight_sync_interval = 3;
  plan.max_policy_lag = 1;
  plan.actors = 0;
  plan.total_env_steps = 0;  // accepted by mistake, the run would end at once and FAIL below
  try {
    run_in_process(plan);
    FAIL() << "max_policy_lag 1 with weight_sync_interval 3 was accepted";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("learner.max_policy_lag (1)"), std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("learner.weight_sync_interval - 1 (2)"), std::string::npos)
        << error.what();
  }
}

// The first actor's 2nd episode goes out as corrupt bytes: the learner drops it, counts
// it as malformed, refunds its credit, and the run ends normally.
TEST(InProcessLoops, AMalformedEpisodeIsDroppedAndCountedNotFatal) {
  RunPlan plan;
  plan.corrupt_episode_of_first_actor = 2;
  const RunOutcome run = run_in_process(plan);
  int64_t malformed = 0;
  for (const auto& [reason, count] : run.learner.dropped) {
    if (reason.rfind("malformed_", 0) == 0) malformed += count;
  }
  EXPECT_EQ(malformed, 1) << "drop reasons counted: " << run.learner.dropped.size();
  EXPECT_EQ(run.actors[0].corrupt_messages_injected, 1);
  EXPECT_EQ(run.learner.end, RunEnd::kFinished);
  EXPECT_GE(run.learner.env_steps, plan.total_env_steps);
  expect_every_episode_accounted_for(run);
}

// The transport itself: order per sender and receiver, a full inbox holding back only
// sends to that rank, and flush() failing with the rank that never received.
TEST(InProcessTransport, KeepsOrderPerDestinationAndAFullInboxHoldsBackOnlyItsOwnSends) {
  InProcessNetwork network(3, /*inbox_bound=*/2, /*flush_timeout_s=*/0.2);
  InProcessTransport sender(network, 0), first(network, 1), second(network, 2);
  for (uint8_t i = 0; i < 4; ++i) sender.send(1, MessageTag::kCredit, {i});
  sender.send(2, MessageTag::kStop, {9});
  EXPECT_EQ(sender.progress(), 2u) << "two sends to the full inbox of rank 1 should wait";
  const std::optional<Message> to_second = second.poll();
  ASSERT_TRUE(to_second.has_value()) << "a full inbox of rank 1 held back a send to rank 2";
  EXPECT_EQ(to_second->bytes, std::vector<uint8_t>{9});
  EXPECT_EQ(to_second->source, 0);
  try {
    sender.flush();
    FAIL() << "flush() returned with rank 1's inbox full";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("rank 1's inbox stayed full"), std::string::npos)
        << error.what();
  }
  for (uint8_t expected = 0; expected < 4; ++expected) {
    const std::optional<Message> message = first.poll();
    ASSERT_TRUE(message.has_value()) << "message " << int(expected);
    EXPECT_EQ(message->bytes, std::vector<uint8_t>{expected});
    sender.progress();
  }
  EXPECT_EQ(network.inbox_high_water(1), 2u);
  EXPECT_THROW(sender.send(3, MessageTag::kCredit, {}), InvalidArgumentError);
}

// Every version an actor applied holds learner 0's parameters of that version, not only the
// last one: a sync that assigned the wrong weights, or the right weights under a wrong
// version number, would show here.
TEST(InProcessLoops, EveryAppliedVersionHoldsTheLearnersWeightsOfThatVersion) {
  const RunOutcome run = run_in_process(RunPlan{});
  std::map<int64_t, std::string> synced(run.learner.synced_weights.entries().begin(),
                                        run.learner.synced_weights.entries().end());
  ASSERT_GE(synced.size(), 3u);
  std::set<std::string> distinct;
  for (const auto& [version, checksum] : synced) distinct.insert(checksum);
  EXPECT_EQ(distinct.size(), synced.size()) << "every update changes the weights";
  for (size_t a = 0; a < run.actors.size(); ++a) {
    const auto& applied = run.actors[a].applied_weights.entries();
    EXPECT_GE(applied.size(), 2u) << "actor rank " << a + 1;
    for (const auto& [version, checksum] : applied) {
      ASSERT_TRUE(synced.count(version)) << "actor rank " << a + 1 << " applied version " << version;
      EXPECT_EQ(checksum, synced[version]) << "actor rank " << a + 1 << " version " << version;
    }
  }
}

}  // namespace
}  // namespace kvrl
