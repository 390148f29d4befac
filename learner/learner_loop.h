// A learner rank's loop: receives episodes from the actors (decoded and validated; a bad
// message is dropped, counted by reason and logged), queues them, and, in lockstep with
// the other learners, updates once every learner holds its share of a batch. Each used
// or dropped episode gives its actor a credit back. Learner 0 sends the weights to every
// actor every `weight_sync_interval` updates, tagged with the policy version. The run
// stops for all learners at the same update, when the env-step or update budget is
// reached; then each learner tells the actors to stop and drains until every actor has
// reported how many episodes it sent, so sent = used + dropped, with reasons.
//
// Learner 0 may also serve remote actors (kvrl actor --connect, through ElasticTransport):
// they join and leave while the run goes on, get the weights on joining and at every sync,
// and are told to stop at the end, but the loop never waits for one.
//
// A run also stops early, on every learner at the same update, when a rank was asked to
// stop (a signal, or an actor's stop request) or after too many consecutive updates with
// a non-finite loss or gradient. Learner 0 writes checkpoints every so many updates or
// seconds, and a final one however the run ends.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/comm/parameter_vector.h"
#include "common/comm/staged_weights.h"
#include "common/comm/transport.h"
#include "common/support/fault_injection.h"
#include "common/support/logger.h"
#include "common/wire/episode_codec.h"
#include "learner/checkpoint.h"
#include "learner/learner.h"
#include "learner/policy_lag.h"
#include "learner/run_reporter.h"

namespace kvrl {

// When a batch's steps go back to their actors' credit (learner.credit_return): as the
// batch is taken from the queue, so actors collect the next batch while it trains, or once
// the update that trained on it is done (and its weights sent), so with about one batch of
// credit actors and learners take turns and the actors act on the newest weights.
enum class CreditReturn { kWhenBatched, kWhenTrained };

struct LearnerLoopOptions {
  std::vector<int> actor_ranks;
  int64_t total_env_steps = 0;
  int64_t max_updates = 0;       // 0 = no limit
  int64_t steps_per_update = 0;  // over all learners
  int64_t weight_sync_interval = 1;
  int64_t max_policy_lag = 0;  // 0 = keep all
  CreditReturn credit_return = CreditReturn::kWhenBatched;
  double log_interval_s = 5.0;
  std::shared_ptr<RunReporter> reporter;  // learner 0: progress, metrics and status; null elsewhere
  // Checkpoints (learner 0): a directory, empty = none; every N updates or S seconds,
  // whichever comes first, and at the end; the newest `checkpoint_keep` are kept.
  std::string checkpoint_dir;
  int64_t checkpoint_interval_updates = 50;
  double checkpoint_interval_s = 600;
  int64_t checkpoint_keep = 3;
  std::string config_yaml;            // saved in every checkpoint
  int64_t max_consecutive_skips = 3;  // stop after this many non-finite updates in a row
  TrainingProgress resumed;           // where a resumed run starts (zeros for a fresh one)
  FaultPlan faults;
  // Learner 0: announce weights and broadcast them on this collective (NCCL or
  // MPI_Ibcast) instead of one message per actor; null = messages.
  std::shared_ptr<WeightBroadcastTransport> weight_broadcast;
  double weight_broadcast_timeout_s = 300;
};

struct LearnerStats {
  int64_t updates = 0;
  int64_t env_steps = 0;  // used in updates, over all learners
  int64_t episodes_received = 0;
  int64_t episodes_used = 0;
  int64_t queued_steps_high_water = 0;  // the most env steps queued at once, bounded by the credit given out
  std::map<std::string, int64_t> dropped;  // by reason
  std::map<int, int64_t> received_from;    // per actor rank, valid or not
  std::map<int, int64_t> announced_by;     // what each actor said it sent
  int64_t remote_actors_joined = 0;        // learner 0: actors that connected over TCP (kvrl actor --connect)
  int64_t remote_actors_left = 0;          // of them, those that left before the run ended
  std::map<std::string, int64_t> remote_connections;  // the RemoteActorServer's counters, by name
  double lag_min = 0, lag_mean = 0, lag_max = 0;
  double mean_return = 0;  // over the last episodes (up to 100 per learner), all learners
  double wall_seconds = 0;
  std::string parameter_checksum;    // CRC-32 of every parameter's bytes
  WeightChecksumLog synced_weights;  // learner 0: each version sent to the actors
  UpdateStats last_update;
  int64_t skipped_updates = 0;  // this run's updates skipped for non-finite values
  RunEnd end = RunEnd::kFinished;
  std::string end_reason;       // why the run stopped early; empty when it finished
  std::string last_checkpoint;  // the newest checkpoint written (learner 0), or ""
};

class LearnerLoop {
 public:
  LearnerLoop(LearnerLoopOptions options, Transport& transport, std::shared_ptr<Communicator> communicator,
              Learner& learner, EpisodeCodec codec, std::shared_ptr<Logger> logger);
  LearnerStats run();

 private:
  void receive(const Message& message, bool stopping);
  void grant_credit(int actor_rank, int64_t steps);
  // Each episode's steps back to the credit of the actor that sent it.
  void return_credit(const std::vector<Episode>& batch);
  void send_weights();
  // A remote actor joined or left (kActorJoined, kActorLeft): it gets the current weights,
  // or is forgotten.
  void note_remote_actor(const Message& message);
  // A remote actor's join, departure or stop request; returns whether `message` was one.
  bool handle_remote_actor_event(const Message& message, bool stopping);
  RunSnapshot snapshot(double wall_seconds) const;
  double recent_mean_return() const;
  // Whether `episode` lags the current policy by more than max_policy_lag versions.
  bool too_stale(const Episode& episode) const;
  // Drops (counted as policy_lag, credit refunded) queued episodes that became too stale.
  void drop_stale_queued_episodes();
  // Takes queued episodes, oldest first, until they hold `share` steps; returns them ordered
  // by actor and episode.
  std::vector<Episode> take_share(int64_t share);
  bool all_actors_done() const;
  TrainingProgress progress(double wall_seconds) const;
  void save_checkpoint(double wall_seconds);
  // Logs a skipped update; returns whether the run must stop for too many in a row.
  bool note_skip();
  // The steps of run(), in order.
  double cast_votes(int64_t share);  // a collective: the learners' ready and stop votes
  void note_interruption();
  bool budget_spent() const;
  // Takes a batch, updates, and does what follows an update; false: stop the run (too many
  // non-finite updates in a row).
  bool update_once(int64_t share);
  void record_batch(const std::vector<Episode>& batch);  // lag and return statistics
  bool count_skip_or_stop();                             // true: stop for non-finite updates
  void after_update();                                   // weights, rates, metrics, checkpoints
  void show_progress_if_due();
  void shut_down();  // stop the actors, drain them, final checkpoint and report
  double elapsed() const;

  LearnerLoopOptions options_;
  Transport& transport_;
  std::shared_ptr<Communicator> communicator_;
  Learner& learner_;
  EpisodeCodec codec_;
  std::shared_ptr<Logger> logger_;
  std::deque<Episode> queue_;
  int64_t queued_steps_ = 0;
  int64_t policy_version_ = 0;
  std::deque<double> recent_returns_;
  std::deque<double> recent_lengths_;
  double batch_lag_mean_ = 0, batch_lag_max_ = 0;
  double env_steps_per_s_ = 0, updates_per_s_ = 0;
  double lag_sum_ = 0;
  int64_t lag_count_ = 0;
  int64_t consecutive_skips_ = 0;
  int64_t last_finite_update_ = 0;
  int stop_requested_by_ = -1;  // the actor rank that asked to stop, or -1
  int64_t checkpointed_update_ = -1;
  std::unique_ptr<StagedWeightSender> staged_weights_;  // learner 0 with options_.weight_broadcast
  std::set<int> remote_actors_;  // learner 0: actors connected over TCP now; never waited for
  LearnerStats stats_;
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_, last_log_, last_checkpoint_time_, last_update_time_;
  int64_t steps_at_last_log_ = 0, updates_at_last_log_ = 0;
};

}  // namespace kvrl
