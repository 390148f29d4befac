// Checks, at start, that a policy's input and output sizes fit an environment's spaces,
// so a mismatch stops the run naming both shapes instead of failing mid-rollout.
#pragma once

#include <cstdint>

#include "actor/space.h"

namespace kvrl {

struct PolicyShape {
  int64_t input_size = 0;   // features the policy reads per step
  bool discrete = true;     // categorical head (else Gaussian)
  int64_t num_outputs = 0;  // actions of the categorical head, or the Gaussian's dimensions
};

// The shape a policy needs for these spaces.
PolicyShape policy_shape_for(const Space& observation_space, const Space& action_space);

// Throws InvalidArgumentError naming the policy's shape and the environment's spaces
// when they do not fit.
void check_policy_fits(const PolicyShape& policy, const Space& observation_space, const Space& action_space);

}  // namespace kvrl
