// What learner 0 tells the world about a run as it goes, in the forms the ecosystem reads:
//   - a progress line on the console: rewritten in place on a terminal, plain lines
//     otherwise (and always in the rank's log file);
//   - per update, the same scalars to TensorBoard event files (RUN_DIR/tensorboard),
//     to RUN_DIR/metrics.jsonl (one JSON object per update) and, for a subset, to
//     RUN_DIR/metrics.csv;
//   - the live status served over HTTP (StatusServer), when a port is configured.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "learner/learner.h"

namespace kvrl {

class Logger;
class StatusServer;
class TensorBoardWriter;

// Who the run is: fixed for its whole life, shown by /status.
struct RunIdentity {
  std::string config_yaml;
  std::string algorithm;
  int world_size = 0;
  std::vector<int> learners;
  std::vector<int> actors;
};

// Where the run stands after an update (or between updates, for the progress line).
struct RunSnapshot {
  int64_t updates = 0;
  int64_t env_steps = 0;
  int64_t policy_version = 0;
  int64_t episodes_used = 0;
  int64_t skipped_updates = 0;
  double wall_seconds = 0;  // training time, including the runs this one resumed
  double return_mean = 0;   // over the recent episodes
  double length_mean = 0;
  double lag_mean = 0, lag_max = 0;  // of the episodes in the last batch
  double env_steps_per_s = 0, updates_per_s = 0;
  int64_t queue_depth = 0;                 // episodes waiting at this learner
  std::map<std::string, int64_t> dropped;  // by reason, over all runs
  UpdateStats update;                      // the last update's losses and statistics
};

struct RunReporterOptions {
  std::string run_dir;
  bool continuing = false;  // resumed: append to the metrics files
  std::string status_address = "127.0.0.1";
  int status_port = 0;             // 0 = no HTTP status
  bool progress_in_place = false;  // rewrite the progress line in place (a terminal)
};

// Whether the progress line is rewritten in place, from KVRL_PROGRESS: "inplace",
// "plain", or unset/"auto": in place when stdout is a terminal and no MPI launcher
// stands in between (Open MPI gives every rank a pseudo-terminal, whatever mpirun's own
// stdout is; launch/kvrl-mpirun sets KVRL_PROGRESS from its own). Throws
// InvalidArgumentError naming any other value.
bool progress_in_place_from_environment();

class RunReporter {
 public:
  // Throws Error when a file cannot be written or the status port cannot be bound.
  RunReporter(RunReporterOptions options, RunIdentity identity, std::shared_ptr<Logger> logger);
  ~RunReporter();

  // After each update: TensorBoard, metrics.jsonl, metrics.csv and the live status.
  void record_update(const RunSnapshot& snapshot);
  // The progress line, every run.log_interval_s.
  void show_progress(const RunSnapshot& snapshot);
  // The run is over ("finished", "interrupted" or "stopped"): ends the in-place line and
  // says so in /status.
  void finish(const RunSnapshot& snapshot, const std::string& state);

  // The scalars of an update, by TensorBoard tag ("loss/policy", "dropped/shutdown", ...).
  static std::vector<std::pair<std::string, double>> scalars(const RunSnapshot& snapshot,
                                                             const std::string& algorithm);
  // The Prometheus text exposition of a snapshot.
  static std::string prometheus_text(const RunSnapshot& snapshot, const std::string& algorithm);
  std::string status_json(const RunSnapshot& snapshot, const std::string& state) const;
  int status_port() const;

 private:
  RunReporterOptions options_;
  RunIdentity identity_;
  std::string config_hash_;
  std::shared_ptr<Logger> logger_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  std::unique_ptr<StatusServer> status_;
  std::ofstream jsonl_;
  std::ofstream csv_;

  bool line_open_ = false;  // an in-place progress line waits for its newline
};

}  // namespace kvrl
