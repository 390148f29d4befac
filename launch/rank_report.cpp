#include "launch/rank_report.h"

#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>

#include "actor/actor_loop.h"
#include "common/comm/device_placement.h"
#include "learner/learner_loop.h"

namespace kvrl {
namespace {

// JSON object keys are strings: ranks become "1", "2", ...
nlohmann::json by_rank(const std::map<int, int64_t>& counts) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [rank, count] : counts) out[std::to_string(rank)] = count;
  return out;
}

// {"versions": {"0": "1a2b3c4d", ...}, "not_kept": n}: the checksum of each weight version.
nlohmann::json weight_checksums(const WeightChecksumLog& log) {
  nlohmann::json versions = nlohmann::json::object();
  for (const auto& [version, checksum] : log.entries()) versions[std::to_string(version)] = checksum;
  return {{"versions", versions}, {"not_kept", log.versions_not_kept()}};
}

// Invalid UTF-8 (a path named in another encoding) becomes U+FFFD instead of an exception.
std::string as_text(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

RankPlacement this_rank_placement(std::string device) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return {host, local_rank_from_environment(), std::move(device)};
}

std::string learner_report_json(int rank, const RankPlacement& placement, const LearnerStats& stats,
                                const LearnerReportExtras& extras, int exit_code) {
  const nlohmann::json report = {
      {"role", "learner"},
      {"rank", rank},
      {"host", placement.host},
      {"local_rank", placement.local_rank},
      {"device", placement.device},
      {"updates", stats.updates},
      {"env_steps", stats.env_steps},
      {"episodes_received", stats.episodes_received},
      {"episodes_used", stats.episodes_used},
      {"queued_steps_high_water", stats.queued_steps_high_water},
      {"dropped", stats.dropped},
      {"received_from", by_rank(stats.received_from)},
      {"remote_actors_joined", stats.remote_actors_joined},
      {"remote_actors_left", stats.remote_actors_left},
      {"remote_connections", stats.remote_connections},
      {"announced_by", by_rank(stats.announced_by)},
      {"lag_min", stats.lag_min},
      {"lag_mean", stats.lag_mean},
      {"lag_max", stats.lag_max},
      {"mean_return", stats.mean_return},
      {"wall_seconds", stats.wall_seconds},
      {"resumed_from_update", extras.resumed_from_update},
      {"skipped_updates", stats.skipped_updates},
      {"exit_code", exit_code},
      {"allreduce_buckets",
       {{"started", extras.allreduce_buckets_started},
        {"during_backward", extras.allreduce_buckets_during_backward}}},
      {"last_checkpoint", stats.last_checkpoint},
      {"parameter_checksum", stats.parameter_checksum},
      {"weights_synced", weight_checksums(stats.synced_weights)},
  };
  return as_text(report);
}

std::string actor_report_json(int rank, const RankPlacement& placement, const ActorStats& stats,
                              int exit_code) {
  const nlohmann::json report = {
      {"role", "actor"},
      {"rank", rank},
      {"host", placement.host},
      {"local_rank", placement.local_rank},
      {"device", placement.device},
      {"env_steps", stats.env_steps},
      {"episodes_sent", stats.episodes_sent},
      {"episodes_sent_to", stats.episodes_sent_to},
      {"weight_updates_applied", stats.weight_updates_applied},
      {"cache_invalidations", stats.cache_invalidations},
      {"context_steps_rebuilt", stats.context_steps_rebuilt},
      {"contexts_restarted", stats.contexts_restarted},
      {"contexts_kept_stale", stats.contexts_kept_stale},
      {"segment_restarts", stats.segment_restarts},
      {"fragments_continuing", stats.fragments_continuing},
      {"context_prefix_steps", stats.context_prefix_steps},
      {"graph_steps", stats.graph_steps},
      {"policy_steps", stats.policy_steps},
      {"partial_policy_steps", stats.partial_policy_steps},
      {"policy_version", stats.policy_version},
      {"weights_applied", weight_checksums(stats.applied_weights)},
      {"partial_episodes_at_stop", stats.partial_episodes_at_stop},
      {"unsent_episodes_at_stop", stats.unsent_episodes_at_stop},
      {"asked_to_stop", stats.asked_to_stop},
      {"exit_code", exit_code},
      {"corrupt_messages_injected", stats.corrupt_messages_injected},
  };
  return as_text(report);
}

std::string drop_counts_json(const LearnerStats& stats) { return as_text(nlohmann::json(stats.dropped)); }

}  // namespace kvrl
