// The native MuJoCo environments as the actor uses them: spaces, observed parts, seeded
// resets and automatic resets in a VectorEnv, and refusals. Step-by-step agreement with
// Gymnasium is tests/conformance/test_mujoco_conformance.py.
#include <gtest/gtest.h>

#include "actor/env_registry.h"
#include "actor/mujoco_locomotion.h"
#include "actor/vector_env.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

#define SKIP_WITHOUT_MUJOCO() \
  if (!mujoco_available()) GTEST_SKIP() << "built without the MuJoCo C library"

std::unique_ptr<Environment> make_locomotion(const std::string& name,
                                             ObservedPart observe = ObservedPart::kAll,
                                             const EnvOptions& options = {}) {
  EnvironmentRequest request;
  request.name = name;
  request.options = options;
  request.locomotion.observe = observe;
  return make_environment(request);
}

TEST(MujocoEnvironment, HasGymnasiumsSpacesAndTimeLimit) {
  SKIP_WITHOUT_MUJOCO();
  const std::map<std::string, std::pair<int64_t, int64_t>> sizes{
      {"Hopper-v5", {11, 3}}, {"HalfCheetah-v5", {17, 6}}, {"Walker2d-v5", {17, 6}}, {"Ant-v5", {105, 8}}};
  for (const auto& [name, observation_and_action] : sizes) {
    const auto env = make_locomotion(name);
    EXPECT_EQ(env->observation_space().flat_size(), observation_and_action.first) << name;
    const Space& actions = env->action_space();
    ASSERT_FALSE(actions.is_discrete()) << name;
    EXPECT_EQ(actions.flat_size(), observation_and_action.second) << name;
    EXPECT_EQ(actions.low, std::vector<float>(actions.flat_size(), -1.0f)) << name;
    EXPECT_EQ(actions.high, std::vector<float>(actions.flat_size(), 1.0f)) << name;
    EXPECT_EQ(env->time_limit(), 1000) << name;
  }
}

TEST(MujocoEnvironment, PartiallyObservedVariantsKeepPositionsOrVelocities) {
  SKIP_WITHOUT_MUJOCO();
  EXPECT_EQ(make_locomotion("Hopper-v5", ObservedPart::kPositions)->observation_space().flat_size(), 5);
  EXPECT_EQ(make_locomotion("Hopper-v5", ObservedPart::kVelocities)->observation_space().flat_size(), 6);
  EXPECT_EQ(make_locomotion("Ant-v5", ObservedPart::kPositions)->observation_space().flat_size(), 13);
  EXPECT_EQ(make_locomotion("Ant-v5", ObservedPart::kVelocities)->observation_space().flat_size(), 14);

  // The positions variant shows the leading part of the full observation, step after step.
  std::vector<std::unique_ptr<Environment>> full, positions;
  full.push_back(make_locomotion("Walker2d-v5"));
  positions.push_back(make_locomotion("Walker2d-v5", ObservedPart::kPositions));
  NativeVectorEnv a(std::move(full), 5), b(std::move(positions), 5);
  a.reset();
  b.reset();
  const std::vector<float> action{0.3f, -0.2f, 0.1f, 0.5f, -0.4f, 0.0f};
  for (int t = 0; t < 20; ++t) {
    ASSERT_EQ(std::vector<float>(a.observations().begin(), a.observations().begin() + 8), b.observations())
        << t;
    a.step(action);
    b.step(action);
  }
}

TEST(MujocoEnvironment, ResetsBySeedAndRestartsEndedEpisodes) {
  SKIP_WITHOUT_MUJOCO();
  auto make_vector = [](uint64_t seed) {
    std::vector<std::unique_ptr<Environment>> envs;
    envs.reserve(3);
    for (int i = 0; i < 3; ++i) envs.push_back(make_locomotion("Hopper-v5"));
    return NativeVectorEnv(std::move(envs), seed);
  };
  NativeVectorEnv a = make_vector(1), b = make_vector(1), c = make_vector(2);
  a.reset();
  b.reset();
  c.reset();
  EXPECT_EQ(a.observations(), b.observations());
  EXPECT_NE(a.observations(), c.observations());
  // Full thrust on every joint topples the hopper within a few hundred steps.
  const std::vector<float> thrust(size_t{3} * 3, 1.0f);
  int terminations = 0;
  for (int t = 0; t < 400 && terminations == 0; ++t) {
    a.step(thrust);
    for (size_t i = 0; i < 3; ++i) {
      if (!a.terminated()[i]) continue;
      ++terminations;
      EXPECT_TRUE(a.is_init()[i]);
      EXPECT_FALSE(a.truncated()[i]);
      EXPECT_NE(a.final_observations()[i * 11], a.observations()[i * 11]) << "the next episode starts afresh";
    }
  }
  EXPECT_GT(terminations, 0) << "an unhealthy hopper must terminate";
}

TEST(MujocoEnvironment, RefusesAModelFolderWithoutTheModel) {
  SKIP_WITHOUT_MUJOCO();
  EnvironmentRequest request;
  request.name = "Hopper-v5";
  request.locomotion.model_dir = "/nonexistent/assets";
  try {
    make_environment(request);
    FAIL() << "a missing model file must be refused";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("model file '/nonexistent/assets/hopper.xml' not found"),
              std::string::npos)
        << error.what();
    EXPECT_NE(std::string(error.what()).find("env.mujoco_model_dir"), std::string::npos) << error.what();
  }
}

TEST(MujocoEnvironment, ObservedPartsApplyToMujocoEnvironmentsOnly) {
  EXPECT_THROW(make_locomotion("CartPole-v1", ObservedPart::kVelocities), InvalidArgumentError);
}

}  // namespace
}  // namespace kvrl
