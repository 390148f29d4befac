#include "actor/policy_fit.h"

#include <string>

#include "common/support/errors.h"

namespace kvrl {
namespace {

std::string describe(const PolicyShape& policy) {
  return "input_size " + std::to_string(policy.input_size) + ", " +
         (policy.discrete ? "categorical over " : "Gaussian over ") + std::to_string(policy.num_outputs) +
         (policy.discrete ? " actions" : " dimensions");
}

}  // namespace

PolicyShape policy_shape_for(const Space& observation_space, const Space& action_space) {
  return {observation_space.flat_size(), action_space.is_discrete(),
          action_space.is_discrete() ? action_space.n : action_space.flat_size()};
}

void check_policy_fits(const PolicyShape& policy, const Space& observation_space, const Space& action_space) {
  const PolicyShape needed = policy_shape_for(observation_space, action_space);
  if (policy.input_size != needed.input_size || policy.discrete != needed.discrete ||
      policy.num_outputs != needed.num_outputs) {
    throw InvalidArgumentError(
        "the policy (" + describe(policy) + ") does not fit the environment: observations " +
        observation_space.describe() + ", actions " + action_space.describe() + " need " + describe(needed));
  }
}

}  // namespace kvrl
