// The environment registry of a build without the MuJoCo C library or the Gymnasium
// bridge: the MuJoCo names are known, asking for one (or for a gym: id) says how to get
// it, and everything else works as before.
#include <gtest/gtest.h>

#include "actor/env_registry.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

TEST(WithoutMujoco, AskingForALocomotionTaskSaysHowToGetMujoco) {
  ASSERT_FALSE(mujoco_available());
  for (const std::string name : {"Hopper-v5", "HalfCheetah-v5", "Walker2d-v5", "Ant-v5"}) {
    try {
      make_environment(name, {});
      FAIL() << name << " must be refused without MuJoCo";
    } catch (const InvalidArgumentError& error) {
      const std::string message = error.what();
      EXPECT_NE(message.find(name + " needs the MuJoCo C library, which this build did not find"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("run scripts/setup.sh"), std::string::npos) << message;
    }
  }
}

TEST(WithoutGymBridge, AGymIdSaysHowToGetTheBridge) {
  try {
    make_environment("gym:CartPole-v1", {});
    FAIL() << "a gym: id must be refused without the bridge";
  } catch (const InvalidArgumentError& error) {
    const std::string message = error.what();
    EXPECT_NE(
        message.find("gym:CartPole-v1: gym: environments need the Gymnasium bridge, which this build did "
                     "not include"),
        std::string::npos)
        << message;
    EXPECT_NE(message.find("run scripts/setup.sh"), std::string::npos) << message;
  }
}

TEST(WithoutMujoco, TheNamesAreListedAndTheOtherEnvironmentsWork) {
  const std::vector<std::string> names = builtin_environment_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "Walker2d-v5"), names.end());
  EXPECT_EQ(make_environment("CartPole-v1", {})->observation_space().flat_size(), 4);
}

}  // namespace
}  // namespace kvrl
