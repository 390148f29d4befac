// `kvrl train CONFIG.yaml [key=value ...]`: the distributed actor-learner run. Ranks
// below `learners` learn, the others act. Every rank reads and validates the config
// before any starts work; learner 0 prints and saves the effective config, logs
// progress, and prints the summary as the last line.
#pragma once

#include <string>
#include <vector>

namespace kvrl {

// Returns the process exit code (0 when the run finished). Must run under mpirun/mpiexec
// with at least learners + 1 ranks; otherwise it says how to launch and returns 2.
int run_train(const std::vector<std::string>& args);

}  // namespace kvrl
