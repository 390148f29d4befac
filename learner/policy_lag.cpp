#include "learner/policy_lag.h"

namespace kvrl {

std::string policy_lag_problem(int64_t max_policy_lag, int64_t weight_sync_interval) {
  if (max_policy_lag <= 0 || max_policy_lag >= weight_sync_interval - 1) return "";
  return "learner.max_policy_lag (" + std::to_string(max_policy_lag) + ") must be 0 (keep all) or at least " +
         "learner.weight_sync_interval - 1 (" + std::to_string(weight_sync_interval - 1) +
         "): actors act with weights up to that many versions old, and every episode would be dropped";
}

}  // namespace kvrl
