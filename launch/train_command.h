// `kvrl train CONFIG.yaml [key=value ...]`: the distributed actor-learner run. Ranks
// below `learners` learn, the others act. Every rank reads and validates the config
// before any starts work; learner 0 prints and saves the effective config, logs
// progress, and prints the summary as the last line.
// `kvrl train [CONFIG.yaml] --resume RUN_DIR [key=value ...]` continues a run from the
// newest usable checkpoint in RUN_DIR/checkpoints, with RUN_DIR's saved config unless a
// config file is given (its env and model must match the checkpoint's).
#pragma once

#include <string>
#include <vector>

namespace kvrl {

// Exit codes of `kvrl train` (docs/reliability.md).
inline constexpr int kTrainFinished = 0;
inline constexpr int kTrainFailed = 1;     // a rank failed (MPI_Abort)
inline constexpr int kTrainBadInput = 2;   // config or command line rejected before any work
inline constexpr int kTrainNonFinite = 3;  // stopped after too many NaN/Inf updates; checkpoint saved
// A peer rank went silent for run.peer_timeout_s (kvrl's heartbeats); the last checkpoint stands.
inline constexpr int kTrainPeerLost = 4;
// An environment's own code failed (a Python exception in a gym: environment); the rank
// logged the traceback. The last checkpoint stands.
inline constexpr int kTrainEnvironmentFailed = 5;
inline constexpr int kTrainInterrupted = 75;  // stopped by a signal; checkpoint saved (EX_TEMPFAIL)

// Returns the process exit code. Must run under mpirun/mpiexec with at least
// learners + 1 ranks; otherwise it says how to launch and returns kTrainBadInput.
struct TrainArguments;

int run_train(const TrainArguments& arguments);

}  // namespace kvrl
