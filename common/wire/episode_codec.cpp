#include "common/wire/episode_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "common/support/errors.h"
#include "common/wire/crc32.h"

namespace kvrl {
namespace {

using Reason = MalformedMessageError::Reason;

enum class FieldId : uint16_t {
  kObservations = 1,
  kActions,
  kRewards,
  kTerminated,
  kTruncated,
  kIsInit,
  kBehaviourLogProbs,
  kValues,
  kPolicyVersions,
  kFinalObservation,
  kContextObservations,
};
enum class Dtype : uint8_t { kFloat32 = 1, kUInt8 = 2, kInt64 = 3 };

constexpr size_t kHeaderBytes = 56;
constexpr size_t kFieldEntryBytes = 16;
constexpr size_t kTrailerBytes = 4;
constexpr uint16_t kFieldCount = 11;

struct FieldLayout {
  FieldId id;
  Dtype dtype;
  uint32_t dim0;
  uint32_t dim1;  // 0 for a 1-d field
};

size_t dtype_size(Dtype dtype) { return dtype == Dtype::kFloat32 ? 4 : dtype == Dtype::kUInt8 ? 1 : 8; }
size_t field_bytes(const FieldLayout& f) { return dtype_size(f.dtype) * f.dim0 * (f.dim1 ? f.dim1 : 1); }

std::vector<FieldLayout> layout_for(uint32_t length, uint32_t context_length, const EpisodeSpec& spec) {
  const auto obs = static_cast<uint32_t>(spec.observation_size);
  const auto act = static_cast<uint32_t>(spec.action_size);
  const Dtype observed =
      spec.observation_element == ObservationElement::kUInt8 ? Dtype::kUInt8 : Dtype::kFloat32;
  return {{FieldId::kObservations, observed, length, obs},
          {FieldId::kActions, Dtype::kFloat32, length, act},
          {FieldId::kRewards, Dtype::kFloat32, length, 0},
          {FieldId::kTerminated, Dtype::kUInt8, length, 0},
          {FieldId::kTruncated, Dtype::kUInt8, length, 0},
          {FieldId::kIsInit, Dtype::kUInt8, length, 0},
          {FieldId::kBehaviourLogProbs, Dtype::kFloat32, length, 0},
          {FieldId::kValues, Dtype::kFloat32, length, 0},
          {FieldId::kPolicyVersions, Dtype::kInt64, length, 0},
          {FieldId::kFinalObservation, observed, obs, 0},
          {FieldId::kContextObservations, observed, context_length, obs}};
}

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}
template <typename T>
T get(const uint8_t* at) {
  T value;
  std::memcpy(&value, at, sizeof(T));
  return value;
}

template <typename T>
bool all_finite(const std::vector<T>& values) {
  for (T value : values) {
    if (!std::isfinite(value)) return false;
  }
  return true;
}

// What is wrong with an episode's content, or nothing. Shared by both directions so that
// what an actor may send and what a learner accepts cannot drift apart.
std::optional<std::string> content_problem(const Episode& e, const EpisodeSpec& spec) {
  const int64_t t = e.length();
  if (t < 1 || t > spec.max_length) {
    return "length " + std::to_string(t) + " is outside [1, " + std::to_string(spec.max_length) + "]";
  }
  const auto size_ok = [&](size_t size, int64_t per_step) {
    return static_cast<int64_t>(size) == t * per_step;
  };
  for (const ObservationValues* values : {&e.observations, &e.final_observation, &e.context_observations}) {
    if (!values->empty() && values->element() != spec.observation_element) {
      return "observations are " + element_name(values->element()) + ", the spec's are " +
             element_name(spec.observation_element);
    }
  }
  if (!size_ok(e.observations.size(), spec.observation_size) ||
      !size_ok(e.actions.size(), spec.action_size) || !size_ok(e.terminated.size(), 1) ||
      !size_ok(e.truncated.size(), 1) || !size_ok(e.is_init.size(), 1) ||
      !size_ok(e.behaviour_log_probs.size(), 1) || !size_ok(e.values.size(), 1) ||
      !size_ok(e.policy_versions.size(), 1) ||
      static_cast<int64_t>(e.final_observation.size()) != spec.observation_size) {
    return std::string("field sizes do not match the length and the spec");
  }
  for (int64_t i = 0; i < t; ++i) {
    const bool last = i == t - 1;
    if (e.terminated[i] > 1 || e.truncated[i] > 1 || e.is_init[i] > 1)
      return std::string("a flag is not 0 or 1");
    if (!last && (e.terminated[i] || e.truncated[i]))
      return "episode ends early at step " + std::to_string(i);
    if (e.policy_versions[i] < 0) return std::string("negative policy version");
  }
  if (e.terminated[t - 1] && e.truncated[t - 1]) {
    return std::string("the last step is both terminated and truncated");
  }
  if (spec.whole_episodes && !e.terminated[t - 1] && !e.truncated[t - 1]) {
    return std::string(
        "the episode does not end, but this run ships whole episodes (actor.fragment_steps = 0)");
  }
  if (!e.observations.all_finite() || !all_finite(e.actions) || !all_finite(e.rewards) ||
      !all_finite(e.behaviour_log_probs) || !all_finite(e.values) || !e.final_observation.all_finite() ||
      !e.context_observations.all_finite() || !std::isfinite(e.return_before)) {
    return std::string("a value is not finite");
  }
  return std::nullopt;
}

// What makes a fragment inconsistent with the stream it claims to continue, or nothing.
std::optional<std::string> fragment_problem(const Episode& e, const EpisodeSpec& spec) {
  if (e.stream < 0 || e.stream >= spec.streams) {
    return "unknown stream " + std::to_string(e.stream) + " (an actor steps " + std::to_string(spec.streams) +
           " environments)";
  }
  const int64_t context = e.context_length();
  if (context > spec.max_context) {
    return "context prefix of " + std::to_string(context) + " steps is longer than the policy's reach (" +
           std::to_string(spec.max_context) + ")";
  }
  if (e.first_step < 0 || context > e.first_step) {
    return "step numbers: a prefix of " + std::to_string(context) + " steps before step " +
           std::to_string(e.first_step) + " reaches before the episode's first step";
  }
  if (e.first_step == 0 && e.is_init[0] != 1)
    return std::string("the episode's first step is not marked is_init");
  if (e.is_init[0] == 1 && context > 0) {
    return "the first step starts a context but carries a prefix of " + std::to_string(context) + " steps";
  }
  if (e.is_init[0] != 1 && context == 0 && spec.max_context > 0) {
    return "step " + std::to_string(e.first_step) + " continues a context but carries none of it";
  }
  // A longer context would take positions the learner's window does not have.
  int64_t run = context;
  for (int64_t i = 0; i < e.length() && spec.segment_steps > 0; ++i) {
    run = e.is_init[i] ? 1 : run + 1;
    if (run > spec.segment_steps) {
      return "the context at step " + std::to_string(e.first_step + i) + " holds " + std::to_string(run) +
             " steps, more than a segment (" + std::to_string(spec.segment_steps) + ")";
    }
  }
  return std::nullopt;
}

}  // namespace

double Episode::episode_return() const {
  double total = return_before;
  for (float reward : rewards) total += reward;
  return total;
}

int64_t Episode::context_length() const {
  return observation_size > 0 ? static_cast<int64_t>(context_observations.size()) / observation_size : 0;
}

bool Episode::ends_episode() const {
  return !rewards.empty() && (terminated.back() != 0 || truncated.back() != 0);
}

int64_t Episode::oldest_policy_version() const {
  return policy_versions.empty() ? 0 : *std::min_element(policy_versions.begin(), policy_versions.end());
}

EpisodeCodec::EpisodeCodec(EpisodeSpec spec) : spec_(spec) {
  if (spec.observation_size < 1 || spec.action_size < 1 || spec.max_length < 1 || spec.max_context < 0 ||
      spec.streams < 1) {
    throw InvalidArgumentError("EpisodeSpec sizes must be positive (observation " +
                               std::to_string(spec.observation_size) + ", action " +
                               std::to_string(spec.action_size) + ", max_length " +
                               std::to_string(spec.max_length) + ", streams " + std::to_string(spec.streams) +
                               "; max_context " + std::to_string(spec.max_context) + " >= 0)");
  }
}

std::vector<uint8_t> EpisodeCodec::encode(const Episode& e) const {
  if (e.observation_size != spec_.observation_size || e.action_size != spec_.action_size) {
    throw InvalidArgumentError("episode sizes (observation " + std::to_string(e.observation_size) +
                               ", action " + std::to_string(e.action_size) +
                               ") differ from the codec's spec");
  }
  if (auto problem = content_problem(e, spec_))
    throw InvalidArgumentError("cannot encode episode: " + *problem);
  if (static_cast<int64_t>(e.context_observations.size()) != e.context_length() * spec_.observation_size) {
    throw InvalidArgumentError("cannot encode episode: its context prefix is not whole observations");
  }
  if (auto problem = fragment_problem(e, spec_))
    throw InvalidArgumentError("cannot encode fragment: " + *problem);
  const auto length = static_cast<uint32_t>(e.length());
  const auto context_length = static_cast<uint32_t>(e.context_length());
  const auto fields = layout_for(length, context_length, spec_);
  size_t payload = kFieldCount * kFieldEntryBytes;
  for (const auto& f : fields) payload += field_bytes(f);

  std::vector<uint8_t> out;
  out.reserve(kHeaderBytes + payload + kTrailerBytes);
  put<uint32_t>(out, kMagic);
  put<uint16_t>(out, kVersion);
  put<uint16_t>(out, kFieldCount);
  put<uint32_t>(out, length);
  put<uint32_t>(out, static_cast<uint32_t>(e.actor_rank));
  put<uint64_t>(out, e.episode_id);
  put<uint32_t>(out, static_cast<uint32_t>(payload));
  put<uint32_t>(out, 0);  // reserved
  put<uint64_t>(out, static_cast<uint64_t>(e.first_step));
  put<uint32_t>(out, static_cast<uint32_t>(e.stream));
  put<uint32_t>(out, context_length);
  put<double>(out, e.return_before);
  for (const auto& f : fields) {
    put<uint16_t>(out, static_cast<uint16_t>(f.id));
    put<uint8_t>(out, static_cast<uint8_t>(f.dtype));
    put<uint8_t>(out, f.dim1 ? 2 : 1);
    put<uint32_t>(out, f.dim0);
    put<uint32_t>(out, f.dim1);
    put<uint32_t>(out, static_cast<uint32_t>(field_bytes(f)));
  }
  auto append = [&](const auto& values) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(values.data());
    out.insert(out.end(), bytes, bytes + values.size() * sizeof(values[0]));
  };
  auto append_observations = [&](const ObservationValues& values) {
    const auto* bytes = static_cast<const uint8_t*>(values.data());
    out.insert(out.end(), bytes, bytes + values.byte_size());
  };
  append_observations(e.observations);
  append(e.actions);
  append(e.rewards);
  append(e.terminated);
  append(e.truncated);
  append(e.is_init);
  append(e.behaviour_log_probs);
  append(e.values);
  append(e.policy_versions);
  append_observations(e.final_observation);
  append_observations(e.context_observations);
  put<uint32_t>(out, crc32(out.data(), out.size()));
  return out;
}

Episode EpisodeCodec::decode(std::span<const uint8_t> message) const {
  if (message.size() < kHeaderBytes + kTrailerBytes) {
    throw MalformedMessageError(Reason::kTruncated, "episode message of " + std::to_string(message.size()) +
                                                        " bytes is shorter than a header");
  }
  const size_t body = message.size() - kTrailerBytes;
  if (get<uint32_t>(message.data() + body) != crc32(message.data(), body)) {
    throw MalformedMessageError(Reason::kChecksum, "episode message checksum mismatch");
  }
  const uint8_t* header = message.data();
  if (get<uint32_t>(header) != kMagic)
    throw MalformedMessageError(Reason::kHeader, "not an episode message (bad magic)");
  if (get<uint16_t>(header + 4) != kVersion) {
    throw MalformedMessageError(Reason::kHeader, "episode format version " +
                                                     std::to_string(get<uint16_t>(header + 4)) + " is not " +
                                                     std::to_string(kVersion));
  }
  if (get<uint16_t>(header + 6) != kFieldCount) {
    throw MalformedMessageError(Reason::kHeader, "episode message has " +
                                                     std::to_string(get<uint16_t>(header + 6)) +
                                                     " fields, expected " + std::to_string(kFieldCount));
  }
  const uint32_t length = get<uint32_t>(header + 8);
  if (length < 1 || length > spec_.max_length) {
    throw MalformedMessageError(Reason::kSpec, "episode length " + std::to_string(length) +
                                                   " is outside [1, " + std::to_string(spec_.max_length) +
                                                   "]");
  }
  const uint32_t payload = get<uint32_t>(header + 24);
  if (kHeaderBytes + static_cast<size_t>(payload) != body) {
    throw MalformedMessageError(Reason::kTruncated, "episode payload size " + std::to_string(payload) +
                                                        " does not match the message size");
  }
  const uint32_t context_length = get<uint32_t>(header + 44);
  if (context_length > spec_.max_context) {
    throw MalformedMessageError(Reason::kFragment, "context prefix of " + std::to_string(context_length) +
                                                       " steps is longer than the policy's reach (" +
                                                       std::to_string(spec_.max_context) + ")");
  }
  const auto expected = layout_for(length, context_length, spec_);
  size_t data_bytes = 0;
  for (const auto& f : expected) data_bytes += field_bytes(f);
  if (payload != kFieldCount * kFieldEntryBytes + data_bytes) {
    throw MalformedMessageError(
        Reason::kSpec, "episode payload size " + std::to_string(payload) + " does not fit the spec's shapes");
  }
  const uint8_t* entry = header + kHeaderBytes;
  for (const auto& f : expected) {
    const bool same = get<uint16_t>(entry) == static_cast<uint16_t>(f.id) &&
                      entry[2] == static_cast<uint8_t>(f.dtype) && entry[3] == (f.dim1 ? 2 : 1) &&
                      get<uint32_t>(entry + 4) == f.dim0 && get<uint32_t>(entry + 8) == f.dim1 &&
                      get<uint32_t>(entry + 12) == field_bytes(f);
    if (!same) {
      throw MalformedMessageError(Reason::kSpec,
                                  "episode field " + std::to_string(get<uint16_t>(entry)) +
                                      " has a dtype or shape other than the spec's (observation " +
                                      std::to_string(spec_.observation_size) + " " +
                                      element_name(spec_.observation_element) + ", action " +
                                      std::to_string(spec_.action_size) + ")");
    }
    entry += kFieldEntryBytes;
  }

  Episode e;
  e.actor_rank = get<uint32_t>(header + 12);
  e.episode_id = get<uint64_t>(header + 16);
  e.observation_size = spec_.observation_size;
  e.action_size = spec_.action_size;
  e.first_step = static_cast<int64_t>(std::min<uint64_t>(get<uint64_t>(header + 32), uint64_t{1} << 62));
  e.stream = get<uint32_t>(header + 40);
  e.return_before = get<double>(header + 48);
  const uint8_t* cursor = entry;
  auto take = [&](auto& values, size_t count) {
    values.resize(count);
    if (count == 0) return;  // an empty vector's data() may be null, which memcpy must not get
    const size_t bytes = count * sizeof(values[0]);
    std::memcpy(values.data(), cursor, bytes);
    cursor += bytes;
  };
  auto take_observations = [&](ObservationValues& values, size_t count) {
    values = ObservationValues::from_bytes(spec_.observation_element, cursor, count);
    cursor += values.byte_size();
  };
  take_observations(e.observations, length * spec_.observation_size);
  take(e.actions, length * spec_.action_size);
  take(e.rewards, length);
  take(e.terminated, length);
  take(e.truncated, length);
  take(e.is_init, length);
  take(e.behaviour_log_probs, length);
  take(e.values, length);
  take(e.policy_versions, length);
  take_observations(e.final_observation, spec_.observation_size);
  take_observations(e.context_observations, static_cast<size_t>(context_length) * spec_.observation_size);
  if (auto problem = content_problem(e, spec_))
    throw MalformedMessageError(Reason::kContent, "episode " + *problem);
  if (auto problem = fragment_problem(e, spec_))
    throw MalformedMessageError(Reason::kFragment, "fragment " + *problem);
  return e;
}

}  // namespace kvrl
