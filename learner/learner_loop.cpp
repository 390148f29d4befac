#include "learner/learner_loop.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <limits>
#include <thread>

#include "common/comm/parameter_vector.h"
#include "common/support/errors.h"
#include "common/support/process_signals.h"
#include "common/wire/crc32.h"
#include "common/wire/weights_codec.h"

namespace kvrl {

LearnerLoop::LearnerLoop(LearnerLoopOptions options, Transport& transport,
                         std::shared_ptr<Communicator> communicator, Learner& learner, EpisodeCodec codec,
                         std::shared_ptr<Logger> logger)
    : options_(std::move(options)),
      transport_(transport),
      communicator_(std::move(communicator)),
      learner_(learner),
      codec_(codec),
      logger_(std::move(logger)) {
  const std::string lag_problem = policy_lag_problem(options_.max_policy_lag, options_.weight_sync_interval);
  if (!lag_problem.empty()) throw InvalidArgumentError(lag_problem);
  stats_.lag_min = std::numeric_limits<double>::infinity();
  stats_.updates = options_.resumed.updates;
  stats_.env_steps = options_.resumed.env_steps;
  policy_version_ = options_.resumed.policy_version;
  recent_returns_ = options_.resumed.recent_returns;
  last_finite_update_ = options_.resumed.updates;
}

void LearnerLoop::grant_credit(int actor_rank, int64_t steps) {
  std::vector<uint8_t> bytes(sizeof(steps));
  std::memcpy(bytes.data(), &steps, sizeof(steps));
  transport_.send(actor_rank, MessageTag::kCredit, std::move(bytes));
}

void LearnerLoop::return_credit(const std::vector<Episode>& batch) {
  for (const Episode& e : batch) grant_credit(static_cast<int>(e.actor_rank), e.length());
}

void LearnerLoop::send_weights() {
  if (options_.weight_broadcast) {
    if (!staged_weights_) {
      staged_weights_ = std::make_unique<StagedWeightSender>(*options_.weight_broadcast,
                                                             options_.weight_broadcast_timeout_s);
    }
    const std::vector<at::Tensor> parameters = learner_.model().parameters();
    WeightAnnouncement announcement{policy_version_, 0};
    for (const auto& p : parameters) announcement.parameter_count += p.numel();
    for (int actor : options_.actor_ranks)
      transport_.send(actor, MessageTag::kWeightsAnnounce, announcement.encode());
    stats_.synced_weights.record(policy_version_, parameters);
    staged_weights_->start(parameters, policy_version_);
    // Remote actors are outside the collective: they get the weights as a message.
    if (!remote_actors_.empty()) {
      const std::vector<uint8_t> bytes =
          WeightsCodec::encode(policy_version_, flatten_parameters(parameters));
      for (int actor : remote_actors_) transport_.send(actor, MessageTag::kWeights, bytes);
    }
    return;
  }
  const std::vector<at::Tensor> parameters = learner_.model().parameters();
  stats_.synced_weights.record(policy_version_, parameters);
  const std::vector<uint8_t> bytes = WeightsCodec::encode(policy_version_, flatten_parameters(parameters));
  for (int actor : options_.actor_ranks) transport_.send(actor, MessageTag::kWeights, bytes);
  for (int actor : remote_actors_) transport_.send(actor, MessageTag::kWeights, bytes);
}

void LearnerLoop::note_remote_actor(const Message& message) {
  if (message.tag == MessageTag::kActorLeft) {
    remote_actors_.erase(message.source);
    ++stats_.remote_actors_left;
    return;
  }
  remote_actors_.insert(message.source);
  ++stats_.remote_actors_joined;
  const std::vector<at::Tensor> parameters = learner_.model().parameters();
  transport_.send(message.source, MessageTag::kWeights,
                  WeightsCodec::encode(policy_version_, flatten_parameters(parameters)));
}

bool LearnerLoop::handle_remote_actor_event(const Message& message, bool stopping) {
  if (message.tag == MessageTag::kActorJoined && stopping) {
    // Too late to act: told to stop at once, so it does not wait for weights that never come.
    transport_.send(message.source, MessageTag::kStop, {static_cast<uint8_t>(stats_.end)});
    return true;
  }
  if (message.tag == MessageTag::kActorJoined || message.tag == MessageTag::kActorLeft) {
    note_remote_actor(message);
    return true;
  }
  if (message.tag == MessageTag::kStopRequest && remote_actors_.count(message.source) > 0) {
    // A remote actor that was asked to stop leaves; the run goes on without it.
    logger_->info(cat("remote actor ", message.source, " was asked to stop: letting it leave"));
    transport_.send(message.source, MessageTag::kStop, {static_cast<uint8_t>(RunEnd::kInterrupted)});
    return true;
  }
  return false;
}

void LearnerLoop::receive(const Message& message, bool stopping) {
  if (handle_remote_actor_event(message, stopping)) return;
  if (message.tag == MessageTag::kStopRequest) {
    if (stop_requested_by_ < 0) {
      stop_requested_by_ = message.source;
      logger_->warn(cat("actor rank ", message.source, " asked to stop the run"));
    }
    return;
  }
  if (message.tag == MessageTag::kActorDone) {
    int64_t count = -1;
    if (message.bytes.size() == sizeof(count)) std::memcpy(&count, message.bytes.data(), sizeof(count));
    stats_.announced_by[message.source] = count;
    return;
  }
  if (message.tag != MessageTag::kEpisode) {
    logger_->warn(cat("dropping a message with unexpected tag ", static_cast<int>(message.tag), " from rank ",
                      message.source));
    return;
  }
  ++stats_.episodes_received;
  ++stats_.received_from[message.source];
  // A dropped message's length is unknown when it is malformed; its actor had charged it
  // against its credit, so refund the most an episode can take.
  auto drop = [&](const std::string& reason, int64_t steps) {
    ++stats_.dropped[reason];
    if (!stopping) grant_credit(message.source, steps);
  };
  if (stopping) {
    drop("shutdown", 0);
    return;
  }
  try {
    Episode episode = codec_.decode(message.bytes);
    if (episode.actor_rank != message.source) {
      throw MalformedMessageError(MalformedMessageError::Reason::kContent,
                                  "episode claims actor rank " + std::to_string(episode.actor_rank));
    }
    if (too_stale(episode)) {
      drop("policy_lag", episode.length());
      return;
    }
    queued_steps_ += episode.length();
    stats_.queued_steps_high_water = std::max(stats_.queued_steps_high_water, queued_steps_);
    queue_.push_back(std::move(episode));
  } catch (const MalformedMessageError& error) {
    logger_->warn(cat("dropped an episode message from rank ", message.source, " (",
                      MalformedMessageError::reason_name(error.reason()), "): ", error.what()));
    drop(std::string("malformed_") + MalformedMessageError::reason_name(error.reason()),
         codec_.spec().max_length);
  }
}

bool LearnerLoop::too_stale(const Episode& episode) const {
  return options_.max_policy_lag > 0 &&
         policy_version_ - episode.oldest_policy_version() > options_.max_policy_lag;
}

void LearnerLoop::drop_stale_queued_episodes() {
  if (options_.max_policy_lag <= 0) return;
  for (auto episode = queue_.begin(); episode != queue_.end();) {
    if (!too_stale(*episode)) {
      ++episode;
      continue;
    }
    ++stats_.dropped["policy_lag"];
    queued_steps_ -= episode->length();
    grant_credit(static_cast<int>(episode->actor_rank), episode->length());
    episode = queue_.erase(episode);
  }
}

std::vector<Episode> LearnerLoop::take_share(int64_t share) {
  std::vector<Episode> batch;
  int64_t steps = 0;
  while (!queue_.empty() && steps < share) {
    steps += queue_.front().length();
    queued_steps_ -= queue_.front().length();
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  // The actors' messages interleave as the machine's timing has it; ordered by actor and
  // episode, a batch packs the same windows whatever the interleaving, so that a run whose
  // batches hold the same episodes (actor.collect=batches) is reproducible from its seed.
  // Fragments of one episode share its id and keep the order their actor sent them in.
  std::stable_sort(batch.begin(), batch.end(), [](const Episode& a, const Episode& b) {
    return a.actor_rank != b.actor_rank ? a.actor_rank < b.actor_rank : a.episode_id < b.episode_id;
  });
  return batch;
}

double LearnerLoop::recent_mean_return() const {
  double total = 0;
  for (double r : recent_returns_) total += r;
  return recent_returns_.empty() ? 0.0 : total / static_cast<double>(recent_returns_.size());
}

RunSnapshot LearnerLoop::snapshot(double wall_seconds) const {
  const TrainingProgress totals = progress(wall_seconds);
  RunSnapshot s;
  s.updates = stats_.updates;
  s.env_steps = stats_.env_steps;
  s.policy_version = policy_version_;
  s.episodes_used = totals.episodes_used;
  s.skipped_updates = totals.skipped_updates;
  s.wall_seconds = totals.wall_seconds;
  s.return_mean = recent_mean_return();
  double length_sum = 0;
  for (double length : recent_lengths_) length_sum += length;
  s.length_mean = recent_lengths_.empty() ? 0.0 : length_sum / static_cast<double>(recent_lengths_.size());
  s.lag_mean = batch_lag_mean_;
  s.lag_max = batch_lag_max_;
  s.env_steps_per_s = env_steps_per_s_;
  s.updates_per_s = updates_per_s_;
  s.queue_depth = static_cast<int64_t>(queue_.size());
  s.dropped = totals.dropped;
  s.update = stats_.last_update;
  return s;
}

bool LearnerLoop::all_actors_done() const {
  for (int actor : options_.actor_ranks) {
    auto announced = stats_.announced_by.find(actor);
    if (announced == stats_.announced_by.end()) return false;
    auto received = stats_.received_from.find(actor);
    const int64_t got = received == stats_.received_from.end() ? 0 : received->second;
    if (got < announced->second) return false;
  }
  return true;
}

TrainingProgress LearnerLoop::progress(double wall_seconds) const {
  TrainingProgress p;
  p.updates = stats_.updates;
  p.env_steps = stats_.env_steps;
  p.policy_version = policy_version_;
  p.episodes_used = options_.resumed.episodes_used + stats_.episodes_used;
  p.skipped_updates = options_.resumed.skipped_updates + stats_.skipped_updates;
  p.wall_seconds = options_.resumed.wall_seconds + wall_seconds;
  p.dropped = options_.resumed.dropped;
  for (const auto& [reason, count] : stats_.dropped) p.dropped[reason] += count;
  p.recent_returns = recent_returns_;
  return p;
}

void LearnerLoop::save_checkpoint(double wall_seconds) {
  if (options_.checkpoint_dir.empty() || communicator_->rank() != 0 || checkpointed_update_ == stats_.updates)
    return;
  CheckpointDirectory directory(options_.checkpoint_dir, options_.checkpoint_keep);
  stats_.last_checkpoint = directory.save(learner_, progress(wall_seconds), options_.config_yaml);
  checkpointed_update_ = stats_.updates;
  logger_->info(cat("checkpoint of update ", stats_.updates, " written to ", stats_.last_checkpoint));
}

bool LearnerLoop::note_skip() {
  ++stats_.skipped_updates;
  ++consecutive_skips_;
  logger_->warn(cat("update ", stats_.updates, " skipped: a loss or gradient was NaN or Inf (",
                    consecutive_skips_, " in a row, ", stats_.skipped_updates,
                    " in this run); the parameters are those of update ", last_finite_update_));
  return consecutive_skips_ >= options_.max_consecutive_skips;
}

double LearnerLoop::elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

// One collective per poll says both whether every learner holds its share and whether
// any was asked to stop: a stop vote outweighs all the ready votes together.
double LearnerLoop::cast_votes(int64_t share) {
  const double learners = communicator_->size();
  const bool asked_to_stop = stop_requested() != 0 || stop_requested_by_ >= 0;
  return communicator_->all_reduce_sum((queued_steps_ >= share ? 1.0 : 0.0) +
                                       (asked_to_stop ? learners + 1.0 : 0.0));
}

void LearnerLoop::note_interruption() {
  stats_.end = RunEnd::kInterrupted;
  stats_.end_reason = stop_requested()          ? "this rank received " + signal_name(stop_requested())
                      : stop_requested_by_ >= 0 ? cat("actor rank ", stop_requested_by_, " asked to stop")
                                                : "another learner was asked to stop";
}

// Checked before an update too: a run resumed at its budget makes no update. Every learner
// holds the same counters, so they all stop together.
bool LearnerLoop::budget_spent() const {
  return stats_.env_steps >= options_.total_env_steps ||
         (options_.max_updates > 0 && stats_.updates >= options_.max_updates);
}

void LearnerLoop::record_batch(const std::vector<Episode>& batch) {
  double batch_lag_sum = 0;
  batch_lag_max_ = 0;
  for (const Episode& e : batch) {
    const double lag = static_cast<double>(policy_version_ - e.oldest_policy_version());
    stats_.lag_min = std::min(stats_.lag_min, lag);
    stats_.lag_max = std::max(stats_.lag_max, lag);
    lag_sum_ += lag;
    ++lag_count_;
    batch_lag_sum += lag;
    batch_lag_max_ = std::max(batch_lag_max_, lag);
    if (e.ends_episode()) {  // a fragment whose episode goes on has no return yet
      recent_returns_.push_back(e.episode_return());
      recent_lengths_.push_back(static_cast<double>(e.first_step + e.length()));
    }
    if (recent_returns_.size() > 100) recent_returns_.pop_front();
    if (recent_lengths_.size() > 100) recent_lengths_.pop_front();
  }
  batch_lag_mean_ = batch.empty() ? 0.0 : batch_lag_sum / static_cast<double>(batch.size());
}

bool LearnerLoop::count_skip_or_stop() {
  if (!stats_.last_update.skipped) {
    consecutive_skips_ = 0;
    last_finite_update_ = stats_.updates;
    return false;
  }
  if (!note_skip()) return false;
  stats_.end = RunEnd::kNonFinite;
  stats_.end_reason =
      cat(consecutive_skips_, " consecutive updates (", last_finite_update_ + 1, " to ", stats_.updates,
          ") had a NaN or Inf loss or gradient; the parameters are still finite, those of update ",
          last_finite_update_);
  return true;
}

void LearnerLoop::after_update() {
  if (communicator_->rank() == 0 && stats_.updates % options_.weight_sync_interval == 0) send_weights();
  const auto now = Clock::now();
  const double since_last_update = std::chrono::duration<double>(now - last_update_time_).count();
  last_update_time_ = now;
  if (since_last_update > 0) {
    env_steps_per_s_ =
        static_cast<double>(stats_.last_update.steps) * communicator_->size() / since_last_update;
    updates_per_s_ = 1.0 / since_last_update;
  }
  if (options_.reporter) options_.reporter->record_update(snapshot(elapsed()));
  if (stats_.updates - std::max<int64_t>(checkpointed_update_, 0) >= options_.checkpoint_interval_updates ||
      std::chrono::duration<double>(now - last_checkpoint_time_).count() >= options_.checkpoint_interval_s) {
    save_checkpoint(elapsed());
    last_checkpoint_time_ = now;
  }
}

bool LearnerLoop::update_once(int64_t share) {
  options_.faults.fail_if_due(stats_.updates + 1, *logger_);
  std::vector<Episode> batch = take_share(share);
  if (options_.credit_return == CreditReturn::kWhenBatched) return_credit(batch);
  record_batch(batch);
  if (options_.faults.nan_loss_at(stats_.updates + 1)) learner_.inject_nonfinite_loss_next_update();
  stats_.last_update = learner_.update(batch, policy_version_);
  ++policy_version_;
  // Episodes that waited in the queue may now lag more than max_policy_lag too.
  drop_stale_queued_episodes();
  ++stats_.updates;
  stats_.episodes_used += static_cast<int64_t>(batch.size());
  stats_.env_steps +=
      static_cast<int64_t>(communicator_->all_reduce_sum(static_cast<double>(stats_.last_update.steps)));
  if (count_skip_or_stop()) return false;
  after_update();  // sends the weights first: the returned credit is spent acting on them
  if (options_.credit_return == CreditReturn::kWhenTrained) return_credit(batch);
  return true;
}

// The progress line's rates are over the interval; the per-update ones are noisier.
void LearnerLoop::show_progress_if_due() {
  const auto now = Clock::now();
  const double seconds = std::chrono::duration<double>(now - last_log_).count();
  if (!options_.reporter || seconds < options_.log_interval_s) return;
  RunSnapshot line = snapshot(elapsed());
  line.env_steps_per_s = static_cast<double>(stats_.env_steps - steps_at_last_log_) / seconds;
  line.updates_per_s = static_cast<double>(stats_.updates - updates_at_last_log_) / seconds;
  options_.reporter->show_progress(line);
  last_log_ = now;
  steps_at_last_log_ = stats_.env_steps;
  updates_at_last_log_ = stats_.updates;
}

void LearnerLoop::shut_down() {
  // Queued episodes are never used now; count them before the shutdown drain.
  stats_.dropped["unused_at_end"] += static_cast<int64_t>(queue_.size());
  queue_.clear();
  for (int actor : options_.actor_ranks)
    transport_.send(actor, MessageTag::kStop, {static_cast<uint8_t>(stats_.end)});
  for (int actor : remote_actors_)
    transport_.send(actor, MessageTag::kStop, {static_cast<uint8_t>(stats_.end)});
  while (!all_actors_done()) {
    if (auto message = transport_.poll()) {
      receive(*message, /*stopping=*/true);
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  if (staged_weights_) staged_weights_->finish();  // the actors joined every broadcast before saying done
  transport_.flush();
  // Whatever ended the run, learner 0 saves where it got to, with the episodes dropped at
  // the stop counted: the parameters are finite even after non-finite updates (skipped).
  save_checkpoint(elapsed());
  if (options_.reporter) {
    options_.reporter->finish(snapshot(elapsed()), stats_.end == RunEnd::kFinished      ? "finished"
                                                   : stats_.end == RunEnd::kInterrupted ? "interrupted"
                                                                                        : "stopped");
  }
}

LearnerStats LearnerLoop::run() {
  start_ = last_log_ = last_checkpoint_time_ = last_update_time_ = Clock::now();
  steps_at_last_log_ = stats_.env_steps;
  updates_at_last_log_ = stats_.updates;
  const int learners = communicator_->size();
  const int64_t share = (options_.steps_per_update + learners - 1) / learners;
  checkpointed_update_ = options_.resumed.updates > 0 ? options_.resumed.updates : -1;
  learner_.synchronize_parameters();
  if (communicator_->rank() == 0) send_weights();
  while (true) {
    while (auto message = transport_.poll()) receive(*message, /*stopping=*/false);
    const double votes = cast_votes(share);
    if (votes > learners) {  // any learner that was asked to stop stops them all, at the same update
      note_interruption();
      break;
    }
    if (budget_spent()) break;
    const bool all_ready = votes == learners;
    if (all_ready && !update_once(share)) break;
    show_progress_if_due();
    if (!all_ready) std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  shut_down();
  stats_.mean_return = communicator_->all_reduce_sum(recent_mean_return()) / learners;
  stats_.lag_mean = lag_count_ ? lag_sum_ / lag_count_ : 0;
  if (!lag_count_) stats_.lag_min = 0;
  stats_.wall_seconds = elapsed();
  stats_.parameter_checksum = parameter_checksum(learner_.model().parameters());
  return stats_;
}

}  // namespace kvrl
