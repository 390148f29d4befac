// An example environment plugin: a two-armed bandit whose better arm is set by an option.
// Build it as a shared library against kvrl's headers and point a config at it:
//   env.plugin: path/to/libkvrl_two_armed_bandit.so
//   env.options: {best_arm: 1}
#include <string>

#include "actor/env_plugin.h"
#include "common/support/errors.h"

namespace {

class TwoArmedBandit : public kvrl::Environment {
 public:
  explicit TwoArmedBandit(int best_arm)
      : best_arm_(best_arm),
        observation_space_(kvrl::Space::box({1}, {0}, {1})),
        action_space_(kvrl::Space::discrete(2)) {}

  std::string name() const override { return "TwoArmedBandit"; }
  const kvrl::Space& observation_space() const override { return observation_space_; }
  const kvrl::Space& action_space() const override { return action_space_; }
  int64_t time_limit() const override { return 10; }

 protected:
  void reset_dynamics(uint64_t, std::span<float> observation) override { observation[0] = 0.0f; }
  kvrl::StepResult step_dynamics(std::span<const float> action, std::span<float> observation) override {
    observation[0] = 1.0f;
    return {static_cast<int>(action[0]) == best_arm_ ? 1.0 : 0.0, false, false};
  }

 private:
  int best_arm_;
  kvrl::Space observation_space_;
  kvrl::Space action_space_;
};

kvrl::Environment* create_bandit(const kvrl::EnvOptions& options) {
  int best_arm = 0;
  for (const auto& [key, value] : options) {
    if (key != "best_arm")
      throw kvrl::InvalidArgumentError("TwoArmedBandit has no option '" + key + "' (options: best_arm)");
    if (value != 0 && value != 1) throw kvrl::InvalidArgumentError("TwoArmedBandit: best_arm must be 0 or 1");
    best_arm = static_cast<int>(value);
  }
  return new TwoArmedBandit(best_arm);
}

}  // namespace

KVRL_ENV_PLUGIN("TwoArmedBandit", create_bandit)
