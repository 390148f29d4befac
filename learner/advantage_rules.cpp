#include "learner/advantage_rules.h"

namespace kvrl {

std::optional<AdvantageKeyProblem> advantage_key_problem(const std::string& algorithm,
                                                         const std::string& advantage_normalization,
                                                         bool recompute_advantages) {
  if (algorithm != "vtrace") return std::nullopt;
  if (advantage_normalization == "batch") {
    return AdvantageKeyProblem{"learner.advantage_normalization", "batch",
                               "V-trace computes its targets one minibatch at a time: expected auto, "
                               "minibatch or none with learner.algorithm = vtrace"};
  }
  if (recompute_advantages) {
    return AdvantageKeyProblem{"learner.recompute_advantages", "true",
                               "expected false with learner.algorithm = vtrace, which recomputes its "
                               "targets at every optimizer step"};
  }
  return std::nullopt;
}

}  // namespace kvrl
