// Training checkpoints: everything a learner needs to carry on as if it had not stopped.
// A checkpoint is a torch.save file (loadable with torch.load(weights_only=True)) holding
// a dict:
//   format "kvrl-checkpoint", format_version, config (the effective config as YAML),
//   progress {updates, env_steps, policy_version, episodes_used, skipped_updates,
//             wall_seconds, dropped {reason: count}, recent_returns},
//   model (the state dict), optimizer {parameter: {step, exp_avg, exp_avg_sq}},
//   rng {torch_cpu}, and checksum: a CRC-32 over all of the above, so a flipped bit in a
//   tensor is caught on load even though the zip records are not checked.
// Files are written to a temporary name, flushed to disk and renamed, so a checkpoint
// either exists whole or not at all; the newest `keep` are kept.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace kvrl {

class Learner;
class Logger;

struct TrainingProgress {
  int64_t updates = 0;
  int64_t env_steps = 0;
  int64_t policy_version = 0;
  int64_t episodes_used = 0;
  int64_t skipped_updates = 0;             // updates skipped for a non-finite loss or gradient
  double wall_seconds = 0;                 // training time, summed over resumed runs
  std::map<std::string, int64_t> dropped;  // episodes dropped, by reason, over all runs
  std::deque<double> recent_returns;       // the last episodes' returns
};

struct CheckpointContents {
  TrainingProgress progress;
  std::string config_yaml;
};

inline constexpr int64_t kCheckpointFormatVersion = 1;

// Writes the learner's parameters, optimizer state, update count and RNG state with
// `progress` and `config_yaml` to `path`, atomically. Throws Error naming the file.
void write_checkpoint(const std::string& path, Learner& learner, const TrainingProgress& progress,
                      const std::string& config_yaml);

// Reads `path` whole and checks it (format, version, checksum, every entry's type and
// shape against `learner`'s model) before changing anything, then restores the learner.
// `check_config` may reject the checkpoint's config by throwing. Throws
// MalformedInputError naming the file and the problem; the learner is unchanged then.
CheckpointContents read_checkpoint(
    const std::string& path, Learner& learner,
    const std::function<void(const std::string& config_yaml)>& check_config = {});

// The effective config a checkpoint was written with, after the checks read_checkpoint
// makes of the file as a whole (format, version, checksum). Throws MalformedInputError.
std::string read_checkpoint_config(const std::string& path);
// Loads a checkpoint's model parameters into `model` (the ActorCritic its config
// describes), with the same checks. Throws MalformedInputError naming the file.
void load_checkpoint_model(const std::string& path, torch::nn::Module& model);

// The checkpoints of a run: <dir>/checkpoint-<update>.pt.
class CheckpointDirectory {
 public:
  // Throws InvalidArgumentError when keep < 1.
  CheckpointDirectory(std::string dir, int64_t keep);

  // Writes the checkpoint of update progress.updates, then removes all but the newest
  // `keep`. Returns its path.
  std::string save(Learner& learner, const TrainingProgress& progress, const std::string& config_yaml);
  // The checkpoint files, newest (highest update) first.
  std::vector<std::string> newest_first() const;
  // Restores from the newest checkpoint that reads whole and passes `check_config`,
  // logging each newer one skipped and why. Returns its path and contents. Throws
  // MalformedInputError listing every file tried when none can be used.
  std::pair<std::string, CheckpointContents> restore_newest(
      Learner& learner, Logger& logger,
      const std::function<void(const std::string& config_yaml)>& check_config) const;

  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int64_t keep_;
};

}  // namespace kvrl
