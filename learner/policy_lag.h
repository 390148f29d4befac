// The one rule between learner.max_policy_lag and learner.weight_sync_interval, checked by
// TrainConfig before any rank starts and by LearnerLoop when it is built. No LibTorch, so
// the config loader's fuzz target (tests/fuzz/train_config_fuzz.cpp) links it alone.
#pragma once

#include <cstdint>
#include <string>

namespace kvrl {

// Why a max_policy_lag cannot work with a weight_sync_interval, or "" when it can: the
// actors act with weights up to interval - 1 versions old, so a smaller positive limit
// would drop every episode until the next sync, which never comes (the learner waits for
// a batch).
std::string policy_lag_problem(int64_t max_policy_lag, int64_t weight_sync_interval);

}  // namespace kvrl
