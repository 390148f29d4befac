// A learner rank's loop: receives episodes from the actors (decoded and validated; a bad
// message is dropped, counted by reason and logged), queues them, and, in lockstep with
// the other learners, updates once every learner holds its share of a batch. Each used
// or dropped episode gives its actor a credit back. Learner 0 sends the weights to every
// actor every `weight_sync_interval` updates, tagged with the policy version. The run
// stops for all learners at the same update, when the env-step or update budget is
// reached; then each learner tells the actors to stop and drains until every actor has
// reported how many episodes it sent, so sent = used + dropped, with reasons.
#pragma once


#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/episode_codec.h"
#include "common/logger.h"
#include "common/mpi_transport.h"
#include "learner/learner.h"

namespace kvrl {

struct LearnerLoopOptions {
  std::vector<int> actor_ranks;
  int64_t total_env_steps = 0;
  int64_t max_updates = 0;       // 0 = no limit
  int64_t steps_per_update = 0;  // over all learners
  int64_t weight_sync_interval = 1;
  int64_t max_policy_lag = 0;    // 0 = keep all
  double log_interval_s = 5.0;
  std::string metrics_path;      // learner 0 appends one CSV row per update here; empty = none
};

struct LearnerStats {
  int64_t updates = 0;
  int64_t env_steps = 0;  // used in updates, over all learners
  int64_t episodes_received = 0;
  int64_t episodes_used = 0;
  std::map<std::string, int64_t> dropped;  // by reason
  std::map<int, int64_t> received_from;    // per actor rank, valid or not
  std::map<int, int64_t> announced_by;     // what each actor said it sent
  double lag_min = 0, lag_mean = 0, lag_max = 0;
  double mean_return = 0;  // over the last episodes (up to 100 per learner), all learners
  double wall_seconds = 0;
  std::string parameter_checksum;  // CRC-32 of every parameter's bytes
  UpdateStats last_update;
};

class LearnerLoop {
 public:
  LearnerLoop(LearnerLoopOptions options, MpiTransport& transport, std::shared_ptr<Communicator> communicator,
              Learner& learner, EpisodeCodec codec, std::shared_ptr<Logger> logger);
  LearnerStats run();

 private:
  void receive(const Message& message, bool stopping);
  void grant_credit(int actor_rank, int64_t steps);
  void send_weights();
  void write_metrics(std::ostream& out, double wall_seconds) const;
  double recent_mean_return() const;
  // Takes queued episodes, oldest first, until they hold `share` steps.
  std::vector<Episode> take_share(int64_t share);
  bool all_actors_done() const;

  LearnerLoopOptions options_;
  MpiTransport& transport_;
  std::shared_ptr<Communicator> communicator_;
  Learner& learner_;
  EpisodeCodec codec_;
  std::shared_ptr<Logger> logger_;
  std::deque<Episode> queue_;
  int64_t queued_steps_ = 0;
  int64_t policy_version_ = 0;
  std::deque<double> recent_returns_;
  double lag_sum_ = 0;
  int64_t lag_count_ = 0;
  LearnerStats stats_;
};

// CRC-32 of the parameters' float32 bytes, as 8 hex digits: equal weights, equal checksums.
std::string parameter_checksum(torch::nn::Module& module);

}  // namespace kvrl
