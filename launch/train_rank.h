// What one rank of `kvrl train` runs once its role, device and transport are settled: the
// learner's or the actor's loop, built from the config, and the report it leaves behind.
#pragma once

#include <c10/core/Device.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/support/fault_injection.h"
#include "common/wire/episode_codec.h"
#include "launch/train_config.h"

namespace kvrl {

class ActorCritic;
struct ActorLoopOptions;
class Communicator;
class Logger;
class Transport;
class WeightBroadcastTransport;

// Where a rank stands in the run: the same facts on every rank but `rank` and `is_learner`.
struct RankPlan {
  int rank = 0;
  int size = 1;
  bool is_learner = false;
  std::vector<int> learners, actors;
  std::filesystem::path run_dir;
  std::string checkpoint_dir;
  bool resuming = false;
  int64_t resume_offset = 0;  // the resumed checkpoint's update: actors seed from it
  bool progress_in_place = false;
  FaultPlan faults;
};

// What both roles' loops are built from.
struct RankResources {
  const TrainConfig& config;
  const RankPlan& plan;
  std::shared_ptr<Logger> logger;
  Transport& transport;
  std::shared_ptr<ActorCritic> model;  // on `device`
  c10::Device device;
  std::shared_ptr<WeightBroadcastTransport> weight_broadcast;  // null: weights as messages
  EpisodeSpec spec;
};

struct RankOutcome {
  int exit_code = 0;
  std::string report_json;  // RUN_DIR/rank<N>.json
};

// What an actor loop needs from the config, for actor ranks and remote actors alike
// (no faults, weights as messages).
ActorLoopOptions actor_loop_options(const TrainConfig& config, std::vector<int> learners, c10::Device device,
                                    uint64_t seed);

RankOutcome run_learner_rank(const RankResources& rank, const std::shared_ptr<Communicator>& communicator);
RankOutcome run_actor_rank(const RankResources& rank);

}  // namespace kvrl
