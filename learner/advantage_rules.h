// The rules between learner.algorithm and the advantage keys, checked by TrainConfig before
// any rank starts and by Learner when it is built. No LibTorch, so the config loader's fuzz
// target (tests/fuzz/train_config_fuzz.cpp) links it alone.
#pragma once

#include <optional>
#include <string>

namespace kvrl {

struct AdvantageKeyProblem {
  std::string key;      // e.g. learner.recompute_advantages
  std::string value;    // the refused value, as written
  std::string allowed;  // why, and what is allowed instead
};

// The first advantage key that `algorithm` cannot honour, if any: V-trace computes its
// targets one minibatch at a time, at every optimizer step, so it has no batch-wide
// standardisation and nothing to recompute between epochs.
std::optional<AdvantageKeyProblem> advantage_key_problem(const std::string& algorithm,
                                                         const std::string& advantage_normalization,
                                                         bool recompute_advantages);

}  // namespace kvrl
