// RUN_DIR/rank<N>.json: what each rank reports at the end of `kvrl train`, as JSON that
// any reader parses (every string escaped, e.g. a checkpoint path with quotes, backslashes
// or non-ASCII letters).
#pragma once

#include <cstdint>
#include <string>

namespace kvrl {

struct ActorStats;
struct LearnerStats;

// Where a rank ran, reported by the rank itself so that a multi-node run's placement can be
// checked from the reports alone (tests/multinode).
struct RankPlacement {
  std::string host;     // gethostname()
  int local_rank = -1;  // local_rank_from_environment(), which picks the rank's GPU; -1 = no launcher set it
  std::string device;   // the device the rank computed on: "cpu", "cuda:0", ...
};

// This process's host name and local rank, with `device`. Does not block; thread-safe.
RankPlacement this_rank_placement(std::string device);

struct LearnerReportExtras {
  int64_t resumed_from_update = 0;
  int64_t allreduce_buckets_started = 0;
  int64_t allreduce_buckets_during_backward = 0;
};

std::string learner_report_json(int rank, const RankPlacement& placement, const LearnerStats& stats,
                                const LearnerReportExtras& extras, int exit_code);
std::string actor_report_json(int rank, const RankPlacement& placement, const ActorStats& stats,
                              int exit_code);
// {"reason": count, ...} of a learner's drops, for its log line.
std::string drop_counts_json(const LearnerStats& stats);

}  // namespace kvrl
