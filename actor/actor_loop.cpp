#include "actor/actor_loop.h"

#include <ATen/Context.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/comm/parameter_vector.h"
#include "common/support/errors.h"
#include "common/support/process_signals.h"
#include "common/wire/weights_codec.h"

namespace kvrl {
namespace {

Episode empty_episode(int64_t rank, uint64_t id, const EpisodeSpec& spec, int64_t stream) {
  Episode e;
  e.actor_rank = rank;
  e.episode_id = id;
  e.observation_size = spec.observation_size;
  e.action_size = spec.action_size;
  e.stream = stream;
  e.observations = e.context_observations = e.final_observation = ObservationValues(spec.observation_element);
  return e;
}

}  // namespace

ActorLoop::ActorLoop(ActorLoopOptions options, Transport& transport, std::shared_ptr<ActorCritic> model,
                     VectorEnv& env, EpisodeCodec codec, std::shared_ptr<Logger> logger)
    : options_(std::move(options)),
      transport_(transport),
      model_(std::move(model)),
      env_(env),
      codec_(codec),
      logger_(std::move(logger)),
      parameters_(model_->parameters()) {
  for (const auto& p : parameters_) parameter_count_ += p.numel();
  credits_.assign(options_.learner_ranks.size(), options_.credit_steps);
  acted_unshipped_.assign(options_.learner_ranks.size(), 0);
  learner_stopped_.assign(options_.learner_ranks.size(), false);
  stats_.episodes_sent_to.assign(options_.learner_ranks.size(), 0);
  if (options_.weight_broadcast) {
    staged_weights_ = std::make_unique<StagedWeightReceiver>(*options_.weight_broadcast, parameter_count_,
                                                             parameters_.front().options(),
                                                             options_.weight_broadcast_timeout_s);
  }
}

void ActorLoop::drain() {
  while (auto message = transport_.poll()) handle(*message);
  if (!staged_weights_) return;
  if (const std::optional<int64_t> version = staged_weights_->poll(parameters_, stats_.policy_version)) {
    adopt_weights(*version);
  }
}

void ActorLoop::handle(const Message& message) {
  const auto learner =
      std::find(options_.learner_ranks.begin(), options_.learner_ranks.end(), message.source);
  if (learner == options_.learner_ranks.end()) {
    logger_->warn(cat("dropping a message with tag ", static_cast<int>(message.tag), " from rank ",
                      message.source, ", which is not a learner"));
    return;
  }
  const size_t index = learner - options_.learner_ranks.begin();
  switch (message.tag) {
    case MessageTag::kCredit: {
      int64_t steps = 0;
      if (message.bytes.size() == sizeof(steps)) std::memcpy(&steps, message.bytes.data(), sizeof(steps));
      // A learner refunds a malformed episode's credit at the longest an episode can be, so
      // a refund can exceed the charge: credit never goes above what the actor started with.
      if (steps > 0) credits_[index] = std::min(credits_[index] + steps, options_.credit_steps);
      break;
    }
    case MessageTag::kStop:
      learner_stopped_[index] = true;
      if (message.bytes.size() == 1 && message.bytes[0] <= static_cast<uint8_t>(RunEnd::kNonFinite)) {
        stats_.end = std::max(stats_.end, static_cast<RunEnd>(message.bytes[0]));
      }
      break;
    case MessageTag::kWeights: {
      try {
        const WeightsMessage weights = WeightsCodec::decode(message.bytes, parameter_count_);
        if (weights.policy_version <= stats_.policy_version)
          break;  // an older broadcast overtaken by a newer one
        apply_weights(weights);
      } catch (const MalformedMessageError& error) {
        logger_->error(cat("dropping a weights message from rank ", message.source, ": ", error.what()));
      }
      break;
    }
    case MessageTag::kWeightsAnnounce: {
      if (!staged_weights_) {
        logger_->error(cat("dropping a weights announcement from rank ", message.source,
                           ": this actor receives weights as messages"));
        break;
      }
      try {
        staged_weights_->announce(WeightAnnouncement::decode(message.bytes));
      } catch (const MalformedMessageError& error) {
        // Learner 0 will wait for this actor in a broadcast it never joins: its timeout
        // (learner.nccl_timeout_s) then stops the run, naming the broadcast.
        logger_->error(cat("dropping a weights announcement from rank ", message.source, ": ", error.what()));
      }
      break;
    }
    default:
      logger_->warn(cat("dropping a message with unexpected tag ", static_cast<int>(message.tag),
                        " from rank ", message.source));
  }
}

void ActorLoop::apply_weights(const WeightsMessage& weights) {
  assign_parameters(weights.values, parameters_);
  adopt_weights(weights.policy_version);
}

void ActorLoop::adopt_weights(int64_t policy_version) {
  ++stats_.cache_invalidations;
  if (stats_.policy_version >= 0) ++stats_.weight_updates_applied;
  stats_.policy_version = policy_version;
  stats_.applied_weights.record(policy_version, parameters_);
  switch (options_.on_weight_update) {
    case WeightUpdatePolicy::kRestart:
      model_->mark_weight_update();
      // Each stream's next step starts a context, whenever its environment is next ready.
      std::fill(restart_pending_.begin(), restart_pending_.end(), 1);
      return;
    case WeightUpdatePolicy::kKeep:
      model_->keep_context_across_weight_update();
      for (const ContextHistory& context : contexts_)
        stats_.contexts_kept_stale += context.steps() > 0 ? 1 : 0;
      return;
    case WeightUpdatePolicy::kReprefill:
      rebuild_contexts();
      return;
  }
}

void ActorLoop::rebuild_contexts() {
  const int64_t obs_size = env_.observation_size();
  const auto streams = static_cast<int64_t>(contexts_.size());
  // Each stream re-encodes the steps that can still change its next step: its whole
  // context, or its last context_reach steps when the window slides.
  std::vector<int64_t> lengths(streams);
  int64_t longest = 0;
  for (int64_t i = 0; i < streams; ++i) {
    lengths[i] = contexts_[i].kept();
    longest = std::max(longest, lengths[i]);
  }
  at::Tensor observations = at::zeros({streams, longest, obs_size}, at::kFloat);
  float* rows = observations.data_ptr<float>();
  for (int64_t i = 0; i < streams; ++i) {
    contexts_[i].copy_last(lengths[i], rows + i * longest * obs_size);
    stats_.context_steps_rebuilt += lengths[i];
  }
  model_->mark_weight_update_keeping_context(observations.to(options_.device),
                                             at::tensor(lengths, at::kLong));
}

std::optional<size_t> ActorLoop::destination_for(int64_t length) {
  if (options_.collect == Collection::kBatches) {
    const auto index = static_cast<size_t>(
        std::max_element(acted_unshipped_.begin(), acted_unshipped_.end()) - acted_unshipped_.begin());
    acted_unshipped_[index] -= length;
    return index;
  }
  const auto best = std::max_element(credits_.begin(), credits_.end());
  if (*best <= 0) return std::nullopt;
  // A learner with any credit left takes a whole episode or fragment: it may overdraw by
  // one, which bounds the steps in flight by credit_steps plus the longest message.
  *best -= length;
  return static_cast<size_t>(best - credits_.begin());
}

bool ActorLoop::charge_acting_step() {
  int64_t needed = static_cast<int64_t>(ready_.size());
  int64_t available = 0;
  for (const int64_t credit : credits_) available += std::max<int64_t>(credit, 0);
  if (available < needed) return false;
  while (needed > 0) {
    const auto best = std::max_element(credits_.begin(), credits_.end());
    const int64_t charge = std::min(needed, *best);
    *best -= charge;
    acted_unshipped_[static_cast<size_t>(best - credits_.begin())] += charge;
    needed -= charge;
  }
  return true;
}

bool ActorLoop::ship_outbox() {
  while (!outbox_.empty()) {
    const std::optional<size_t> destination = destination_for(outbox_.back().length());
    if (!destination) return false;
    const size_t index = *destination;
    std::vector<uint8_t> bytes = codec_.encode(outbox_.back());
    if (options_.faults.corrupt_episode > 0 && stats_.episodes_sent + 1 == options_.faults.corrupt_episode) {
      bytes[bytes.size() / 2] ^= 0x5a;  // the checksum will no longer match
      ++stats_.corrupt_messages_injected;
      logger_->warn(cat("fault injection: corrupting episode message ", options_.faults.corrupt_episode,
                        " on purpose"));
    }
    transport_.send(options_.learner_ranks[index], MessageTag::kEpisode, std::move(bytes));
    ++stats_.episodes_sent;
    ++stats_.episodes_sent_to[index];
    outbox_.pop_back();
  }
  return true;
}

void ActorLoop::record_step(const PolicyStep& step, const std::vector<uint8_t>& is_init,
                            std::span<const int64_t> streams) {
  const int64_t obs_size = env_.observation_size();
  const int64_t act_size = env_.action_size();
  const float* obs = env_.observations().data();
  for (size_t k = 0; k < streams.size(); ++k) {
    const int64_t i = streams[k];
    const float* actions = step.actions.data_ptr<float>() + k * act_size;
    Episode& e = open_[i];
    ContextHistory& context = contexts_[i];
    if (is_init[k]) context.restart();
    if (e.length() == 0) {  // a fragment starts: it carries what its first step attends to
      const int64_t prefix = std::min(context.kept(), options_.context_reach);
      context.append_last(prefix, e.context_observations);
      stats_.context_prefix_steps += prefix;
    }
    e.observations.append(std::span<const float>(obs + i * obs_size, obs_size));
    context.push(obs + i * obs_size);
    e.actions.insert(e.actions.end(), actions, actions + act_size);
    e.is_init.push_back(is_init[k]);
    e.behaviour_log_probs.push_back(step.log_probs.data_ptr<float>()[k]);
    e.values.push_back(step.values.data_ptr<float>()[k]);
    e.policy_versions.push_back(stats_.policy_version);
  }
}

std::vector<uint8_t> ActorLoop::context_starts(std::span<const int64_t> streams) {
  std::vector<uint8_t> init(streams.size());
  for (size_t k = 0; k < streams.size(); ++k) {
    const int64_t i = streams[k];
    init[k] = env_.is_init()[i];
    if (!init[k] && restart_pending_[i]) {
      ++stats_.contexts_restarted;
      init[k] = 1;
    } else if (!init[k] && options_.segment_steps > 0 && contexts_[i].steps() >= options_.segment_steps) {
      ++stats_.segment_restarts;
      init[k] = 1;
    }
    restart_pending_[i] = 0;
  }
  return init;
}

Episode ActorLoop::next_fragment(const Episode& done, int64_t stream) const {
  Episode next = empty_episode(done.actor_rank, done.episode_id, codec_.spec(), stream);
  next.first_step = done.first_step + done.length();
  next.return_before = done.episode_return();
  return next;
}

// Sampling runs where the policy runs: on a GPU its own generator, seeded the same way.
at::Generator ActorLoop::sampling_generator() const {
  const uint64_t seed = options_.seed * 1000003 + static_cast<uint64_t>(transport_.rank());
  if (!options_.device.is_cuda()) return at::detail::createCPUGenerator(seed);
  at::Generator generator = at::globalContext().defaultGenerator(options_.device);
  generator.set_current_seed(seed);
  return generator;
}

// What an observation costs on the wire and in the learners' batches, so a user can see
// that image observations travel as bytes.
void ActorLoop::log_observation_bytes() const {
  const EpisodeSpec& spec = codec_.spec();
  const auto stored = static_cast<int64_t>(element_bytes(spec.observation_element)) * spec.observation_size;
  const int64_t as_floats = 4 * spec.observation_size;
  logger_->info(cat("observations: ", spec.observation_size, " ", element_name(spec.observation_element),
                    " values, ", stored, " bytes per step on the wire (", as_floats - stored,
                    " fewer than float32)"));
}

bool ActorLoop::all_learners_stopped() const {
  return std::all_of(learner_stopped_.begin(), learner_stopped_.end(), [](bool stopped) { return stopped; });
}

// A stop signal: ask the learners to end the run, once.
void ActorLoop::forward_stop_request() {
  if (!stop_requested() || stats_.asked_to_stop) return;
  stats_.asked_to_stop = true;
  logger_->warn("received " + signal_name(stop_requested()) + ": asking the learners to stop the run");
  for (int learner : options_.learner_ranks) transport_.send(learner, MessageTag::kStopRequest, {});
}

at::Tensor ActorLoop::observations_of(std::span<const int64_t> streams) const {
  const int64_t obs_size = env_.observation_size();
  const auto count = static_cast<int64_t>(streams.size());
  bool every_stream_in_order = count == env_.num_envs();
  for (int64_t k = 0; every_stream_in_order && k < count; ++k) every_stream_in_order = streams[k] == k;
  if (every_stream_in_order) {
    return at::from_blob(const_cast<float*>(env_.observations().data()), {count, obs_size}, at::kFloat)
        .to(options_.device);
  }
  at::Tensor rows = at::empty({count, obs_size}, at::kFloat);
  for (int64_t k = 0; k < count; ++k) {
    std::memcpy(rows.data_ptr<float>() + k * obs_size, env_.observations().data() + streams[k] * obs_size,
                obs_size * sizeof(float));
  }
  return rows.to(options_.device);
}

// The policy's step for the current observations of `streams`, with what the episode
// records back on the host in one device-to-host copy. With asynchronous environments the
// trunk's cache is keyed by stream, even on a step that happens to cover every stream.
PolicyStep ActorLoop::act(std::span<const int64_t> streams, const std::vector<uint8_t>& init,
                          at::Generator& generator) {
  const auto count = static_cast<int64_t>(streams.size());
  const at::Tensor is_init =
      at::from_blob(const_cast<uint8_t*>(init.data()), {count}, at::kBool).to(options_.device);
  const at::Tensor stream_ids =
      env_.asynchronous() ? at::tensor(std::vector<int64_t>(streams.begin(), streams.end()), at::kLong)
                          : at::Tensor();
  PolicyStep step = model_->act(observations_of(streams), is_init, generator, /*greedy=*/false, stream_ids);
  ++stats_.policy_steps;
  stats_.partial_policy_steps += count < env_.num_envs() ? 1 : 0;
  stats_.graph_steps += model_->trunk().stepped_from_graph() ? 1 : 0;
  if (options_.device.is_cuda()) {
    const int64_t act_size = env_.action_size();
    const at::Tensor host = at::cat({step.actions, step.log_probs.unsqueeze(1), step.values.unsqueeze(1)}, 1)
                                .to(at::kCPU, at::kFloat);
    step.actions = host.narrow(1, 0, act_size).contiguous();
    step.log_probs = host.select(1, act_size).contiguous();
    step.values = host.select(1, act_size + 1).contiguous();
  }
  step.actions = step.actions.contiguous();  // read as flat rows by record_step and send
  return step;
}

// Records the step's outcome in the open episodes of `streams` and moves the finished
// ones, and the fragments that reached fragment_steps, to the outbox.
void ActorLoop::record_outcomes(std::span<const int64_t> streams, uint64_t& next_episode_id) {
  const int64_t obs_size = env_.observation_size();
  for (const int64_t i : streams) {
    Episode& e = open_[i];
    e.rewards.push_back(static_cast<float>(env_.rewards()[i]));
    e.terminated.push_back(env_.terminated()[i]);
    e.truncated.push_back(env_.truncated()[i]);
    if (env_.terminated()[i] || env_.truncated()[i]) {
      e.final_observation.assign(
          std::span<const float>(env_.final_observations()).subspan(i * obs_size, obs_size));
      outbox_.push_back(std::move(e));
      e = empty_episode(transport_.rank(), next_episode_id++, codec_.spec(), i);
    } else if (options_.fragment_steps > 0 && e.length() == options_.fragment_steps) {
      cut_fragment(i);
    }
  }
}

void ActorLoop::cut_fragment(int64_t stream) {
  const int64_t obs_size = env_.observation_size();
  Episode& e = open_[stream];
  // The episode goes on: the bootstrap state is the observation the next step sees.
  e.final_observation.assign(
      std::span<const float>(env_.observations()).subspan(stream * obs_size, obs_size));
  Episode next = next_fragment(e, stream);
  ++stats_.fragments_continuing;
  outbox_.push_back(std::move(e));
  e = std::move(next);
}

void ActorLoop::step_environments(at::Generator& generator, uint64_t& next_episode_id) {
  const std::vector<uint8_t> init = context_starts(ready_);
  const PolicyStep step = act(ready_, init, generator);
  record_step(step, init, ready_);
  env_.send(ready_, std::span<const float>(step.actions.data_ptr<float>(), step.actions.numel()));
  ready_ = env_.wait_ready();
  stats_.env_steps += static_cast<int64_t>(ready_.size());
  record_outcomes(ready_, next_episode_id);
}

// Every learner has stopped: count what was left, join the announced broadcasts, then tell
// each learner how many episodes to expect and let the sends finish.
void ActorLoop::finish() {
  for (const Episode& e : open_) stats_.partial_episodes_at_stop += e.length() > 0 ? 1 : 0;
  stats_.unsent_episodes_at_stop = static_cast<int64_t>(outbox_.size());
  // Learner 0 waits in every broadcast it announced until each actor has joined it.
  while (staged_weights_ && staged_weights_->outstanding() > 0) {
    drain();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (size_t i = 0; i < options_.learner_ranks.size(); ++i) {
    std::vector<uint8_t> count(sizeof(int64_t));
    std::memcpy(count.data(), &stats_.episodes_sent_to[i], sizeof(int64_t));
    transport_.send(options_.learner_ranks[i], MessageTag::kActorDone, std::move(count));
  }
  transport_.flush();
}

ActorStats ActorLoop::run() {
  at::Generator generator = sampling_generator();
  uint64_t next_episode_id = 0;
  for (int64_t i = 0; i < env_.num_envs(); ++i) {
    open_.push_back(empty_episode(transport_.rank(), next_episode_id++, codec_.spec(), i));
    contexts_.emplace_back(env_.observation_size(), std::max(options_.context_reach, options_.segment_steps));
    ready_.push_back(i);
  }
  restart_pending_.assign(env_.num_envs(), 0);
  // Act only with the learners' weights: wait for version 0.
  while (stats_.policy_version < 0 && !all_learners_stopped()) {
    drain();
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  logger_->info(
      cat("acting with policy version ", stats_.policy_version, " on ", env_.num_envs(), " x ", env_.name()));
  log_observation_bytes();
  env_.reset();
  int64_t vector_steps = 0;
  while (!all_learners_stopped()) {
    drain();
    if (all_learners_stopped()) break;
    forward_stop_request();
    if (stats_.asked_to_stop) {  // wait for the learners' stop, acting no more
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    options_.faults.fail_if_due(++vector_steps, *logger_);
    if (!ship_outbox()) {  // no credit: wait for a learner instead of collecting more
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    if (options_.collect == Collection::kBatches && !charge_acting_step()) {
      // The batch is acted: what is still open goes out with it, then wait for credit.
      for (int64_t i = 0; i < env_.num_envs(); ++i) {
        if (open_[i].length() > 0) cut_fragment(i);
      }
      ship_outbox();
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    step_environments(generator, next_episode_id);
  }
  finish();
  return stats_;
}

}  // namespace kvrl
