// An actor rank's loop: steps its VectorEnv with the ActorCritic on the cached path,
// records complete episodes, or fragments of actor.fragment_steps steps each with the
// context prefix its first step attended to, and ships each to a learner (the one with
// the most credits left, so the load balances); with no credit left it stops stepping
// until a learner grants one, so a slow learner throttles actors and memory stays bounded.
// A stream's context restarts at its episode's start, every segment_steps steps (the
// segment policy) and, with the restart policy, at new weights; every restart is recorded
// as is_init. New weights are applied between steps, then restart, rebuild or keep the
// streams' caches (on_weight_update); a staged broadcast (common/comm/staged_weights.h) is
// joined at a step boundary and swapped in at a later one, once it has landed.
// It ends when every learner has said stop, after telling each learner how many
// episodes it sent. Asked to stop itself (a signal), it stops stepping and asks the
// learners to end the run; episodes cut short or never sent are counted.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "actor/context_history.h"
#include "actor/vector_env.h"
#include "common/comm/parameter_vector.h"
#include "common/comm/staged_weights.h"
#include "common/comm/transport.h"
#include "common/model/actor_critic.h"
#include "common/support/fault_injection.h"
#include "common/support/logger.h"
#include "common/wire/episode_codec.h"
#include "common/wire/weights_codec.h"

namespace kvrl {

// What new weights do to a stream's live context.
enum class WeightUpdatePolicy {
  kRestart,    // the reference's mark_weight_update(): every context restarts (recorded as is_init)
  kReprefill,  // the cache is rebuilt from the context's observations with the new weights
  kKeep,       // the keys and values the old weights computed stay (in-flight updates)
};

struct ActorStats {
  int64_t env_steps = 0;
  int64_t episodes_sent = 0;           // messages: whole episodes or fragments
  int64_t fragments_continuing = 0;    // of them, fragments whose episode went on
  int64_t context_prefix_steps = 0;    // observations sent as fragments' context prefixes
  int64_t segment_restarts = 0;        // contexts restarted after segment_steps steps
  int64_t weight_updates_applied = 0;  // new versions applied after the initial weights
  int64_t cache_invalidations = 0;     // mark_weight_update() calls
  int64_t context_steps_rebuilt = 0;   // steps re-encoded to keep context across updates (reprefill)
  int64_t contexts_restarted = 0;      // streams restarted inside an episode after new weights (restart)
  int64_t contexts_kept_stale = 0;     // streams that went on with the old weights' cache (keep)
  int64_t graph_steps = 0;             // cached steps replayed from a CUDA graph (model.cuda_graphs)
  int64_t policy_steps = 0;            // calls of the policy's cached step
  int64_t partial_policy_steps = 0;    // of them, steps of only some streams (env.stepping: async)
  int64_t policy_version = -1;         // the version acting at the end
  int64_t corrupt_messages_injected = 0;
  int64_t partial_episodes_at_stop = 0;   // episodes still running when the run stopped
  int64_t unsent_episodes_at_stop = 0;    // complete episodes still waiting for a credit
  bool asked_to_stop = false;             // this actor received a stop signal
  RunEnd end = RunEnd::kFinished;         // as the learners said when they stopped
  std::vector<int64_t> episodes_sent_to;  // per learner
  WeightChecksumLog applied_weights;      // each version as the actor's parameters hold it
};

// How an actor ships what it acted (actor.collect). episodes: each episode, or fragment of
// one, as it ends, its steps charged to a learner's credit as it goes out. batches: steps
// are charged as they are acted, and once the credit is spent every open episode is cut into
// a fragment and everything goes out, as TorchRL's collector returns [streams, T] batches;
// with learner.credit_return = when_trained and one batch of credit, actors and learners
// take turns and every step is trained on by the weights that acted it.
enum class Collection { kEpisodes, kBatches };

struct ActorLoopOptions {
  std::vector<int> learner_ranks;
  int64_t credit_steps = 2048;  // env steps that may be in flight to each learner
  uint64_t seed = 0;
  WeightUpdatePolicy on_weight_update = WeightUpdatePolicy::kReprefill;
  int64_t fragment_steps = 0;  // ship fragments of at most this many steps; 0: whole episodes
  Collection collect = Collection::kEpisodes;
  // A stream's context restarts after this many steps (segment policy: max_seq_len - 1,
  // leaving a slot for the bootstrap token); 0: never (a sliding window).
  int64_t segment_steps = 0;
  // How many steps before a step can change what the policy computes for it: the longest
  // context prefix a fragment carries, and what a rebuild re-encodes (sliding window:
  // num_layers * (W - 1); segment: segment_steps - 1, the whole context; 0 without context).
  int64_t context_reach = 0;
  // Where the policy and its caches live; only the recorded step data comes back to the
  // CPU, in one device-to-host copy per step.
  c10::Device device = c10::Device(c10::kCPU);
  FaultPlan faults;  // for tests: corrupt_episode counts episodes sent, exit/abort/kill vector steps
  // Set when learner 0 announces weights and broadcasts them on a collective (NCCL or
  // MPI_Ibcast) instead of sending one message per actor; the staged broadcast's timeout.
  std::shared_ptr<WeightBroadcastTransport> weight_broadcast;
  double weight_broadcast_timeout_s = 300;
};

class ActorLoop {
 public:
  ActorLoop(ActorLoopOptions options, Transport& transport, std::shared_ptr<ActorCritic> model,
            VectorEnv& env, EpisodeCodec codec, std::shared_ptr<Logger> logger);
  // Runs until every learner said stop. Throws on MPI failure.
  ActorStats run();

 private:
  void handle(const Message& message);
  // The step of `streams` (what `step` and `is_init` hold, in that order); `is_init`: per
  // stream, whether this step started its context.
  void record_step(const PolicyStep& step, const std::vector<uint8_t>& is_init,
                   std::span<const int64_t> streams);
  // Which of `streams` start a context with this step: new episodes, restarts after new
  // weights, and segments that reached segment_steps.
  std::vector<uint8_t> context_starts(std::span<const int64_t> streams);
  // Rebuilds every stream's cache from its context's observations (reprefill).
  void rebuild_contexts();
  // The fragment that continues `done`'s episode on stream `stream`.
  Episode next_fragment(const Episode& done, int64_t stream) const;
  void apply_weights(const WeightsMessage& weights);
  // After the parameters hold `policy_version`: bookkeeping and mark_weight_update().
  void adopt_weights(int64_t policy_version);
  // Handles every message waiting, then lets a staged broadcast progress.
  void drain();
  bool ship_outbox();  // returns whether everything was sent
  // The learner the next message of `length` steps goes to, charged for it (episodes) or
  // paid by the steps it was charged as they were acted (batches); none without credit.
  std::optional<size_t> destination_for(int64_t length);
  // batches: charges a step of every ready stream to the learners' credit, if it covers it.
  bool charge_acting_step();
  // Ships stream `stream`'s open episode as a fragment and starts the one that goes on.
  void cut_fragment(int64_t stream);
  // The steps of run().
  at::Generator sampling_generator() const;
  bool all_learners_stopped() const;
  void log_observation_bytes() const;
  void forward_stop_request();
  // Steps the policy on the streams whose environment is ready, sends their actions and
  // waits for the environments that are ready next (all of them, unless env.stepping is async).
  void step_environments(at::Generator& generator, uint64_t& next_episode_id);
  PolicyStep act(std::span<const int64_t> streams, const std::vector<uint8_t>& init,
                 at::Generator& generator);
  // The policy's input rows for `streams`, on the policy's device.
  at::Tensor observations_of(std::span<const int64_t> streams) const;
  void record_outcomes(std::span<const int64_t> streams, uint64_t& next_episode_id);
  void finish();

  ActorLoopOptions options_;
  Transport& transport_;
  std::shared_ptr<ActorCritic> model_;
  VectorEnv& env_;
  EpisodeCodec codec_;
  std::shared_ptr<Logger> logger_;
  std::vector<at::Tensor> parameters_;
  int64_t parameter_count_ = 0;
  std::unique_ptr<StagedWeightReceiver> staged_weights_;  // with options_.weight_broadcast
  std::vector<int64_t> credits_;                          // env steps each learner will still accept
  std::vector<int64_t> acted_unshipped_;  // batches: per learner, steps charged but not yet shipped
  std::vector<bool> learner_stopped_;
  std::vector<Episode> open_;             // the episode, or fragment of one, each environment is in
  std::vector<ContextHistory> contexts_;  // each stream's current context
  std::vector<Episode> outbox_;           // complete episodes waiting for a credit
  ActorStats stats_;
  // Streams whose environment waits for an action: all of them, unless env.stepping is
  // async, when only those whose last step finished.
  std::vector<int64_t> ready_;
  // Per stream: new weights restarted its context (on_weight_update=restart), so its next
  // step records is_init.
  std::vector<uint8_t> restart_pending_;
};

}  // namespace kvrl
