// Fault injection for the reliability tests (docs/reliability.md): what a chosen rank
// does wrong, read from KVRL_FAULT. The variable holds comma-separated faults
// KIND:RANK:N[:COUNT]:
//   corrupt_episode:R:N   actor R sends its Nth episode (1-based) as corrupt bytes
//   exit:R:N              rank R exits with status 1 at its step N, without finalizing MPI
//   abort:R:N             rank R calls std::abort() at its step N (a crash)
//   kill:R:N              rank R sends itself SIGKILL at its step N (the OOM killer's way)
//   freeze:R:N            rank R sends itself SIGSTOP at its step N: alive to MPI, silent to
//                         its peers (a hung host, or a partition MPI does not see)
//   nan_loss:R:N[:COUNT]  learner R's loss is NaN at updates N .. N+COUNT-1 (COUNT: 1)
// A step is an actor's vector step or a learner's update, counting from 1.
#pragma once

#include <cstdint>
#include <string>

namespace kvrl {

class Logger;

struct FaultPlan {
  int64_t corrupt_episode = 0;  // 0 = none
  int64_t exit_at = 0;
  int64_t abort_at = 0;
  int64_t kill_at = 0;
  int64_t freeze_at = 0;
  int64_t nan_loss_from = 0;
  int64_t nan_loss_count = 0;

  // The faults for `rank` in `spec` (KVRL_FAULT's value). Throws InvalidArgumentError
  // naming the entry and the allowed forms on a malformed spec.
  static FaultPlan parse(const std::string& spec, int rank);
  // parse() of KVRL_FAULT, or no faults when it is unset.
  static FaultPlan from_environment(int rank);

  bool nan_loss_at(int64_t update) const {
    return nan_loss_count > 0 && update >= nan_loss_from && update < nan_loss_from + nan_loss_count;
  }
  // Ends or stops the process as planned when `step` is an exit, abort, kill or freeze step,
  // after logging it.
  void fail_if_due(int64_t step, Logger& logger) const;
};

}  // namespace kvrl
