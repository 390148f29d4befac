#include <gtest/gtest.h>

#include <numeric>

#include "actor/classic_control.h"
#include "actor/env_plugin.h"
#include "actor/env_registry.h"
#include "actor/memory_tasks.h"
#include "actor/policy_fit.h"
#include "actor/vector_env.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

std::vector<std::unique_ptr<Environment>> make_many(const std::string& name, int count,
                                                    const EnvOptions& options = {}) {
  std::vector<std::unique_ptr<Environment>> envs;
  envs.reserve(count);
  for (int i = 0; i < count; ++i) envs.push_back(make_environment(name, options));
  return envs;
}

// Plays `steps` steps with a fixed action pattern; returns everything the vector env showed.
std::vector<float> trace(VectorEnv& env, int steps) {
  std::vector<float> seen;
  env.reset();
  std::vector<float> actions(env.num_envs() * env.action_size());
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < actions.size(); ++i) actions[i] = static_cast<float>((t + i) % 2);
    env.step(actions);
    seen.insert(seen.end(), env.observations().begin(), env.observations().end());
    for (double reward : env.rewards()) seen.push_back(static_cast<float>(reward));
  }
  return seen;
}

TEST(VectorEnv, SameSeedGivesTheSameEpisodesAndAnotherSeedDoesNot) {
  NativeVectorEnv a(make_many("CartPole-v1", 3), /*seed=*/7);
  NativeVectorEnv b(make_many("CartPole-v1", 3), /*seed=*/7);
  NativeVectorEnv c(make_many("CartPole-v1", 3), /*seed=*/8);
  const auto seen_a = trace(a, 120);
  EXPECT_EQ(seen_a, trace(b, 120));
  EXPECT_NE(seen_a, trace(c, 120));
}

TEST(VectorEnv, StreamsOfOneVectorDiffer) {
  NativeVectorEnv env(make_many("CartPole-v1", 2), /*seed=*/1);
  env.reset();
  EXPECT_NE(env.observations()[0], env.observations()[4]);
}

TEST(VectorEnv, ResetsEndedEpisodesAndMarksTheirFirstStep) {
  NativeVectorEnv env(make_many("CueRecallTMaze", 2, {{"corridor_length", 3}}), /*seed=*/3);
  env.reset();
  EXPECT_EQ(env.is_init(), (std::vector<uint8_t>{1, 1}));
  const std::vector<float> walk(2, 0.0f);
  for (int t = 0; t < 3; ++t) {
    env.step(walk);
    EXPECT_EQ(env.is_init(), (std::vector<uint8_t>{0, 0})) << t;
    EXPECT_EQ(env.observations()[0], 0.0f) << "the cue shows on the first step only";
  }
  EXPECT_EQ(env.observations()[1], 1.0f) << "at the junction";
  env.step(walk);  // the turn ends both episodes
  EXPECT_EQ(env.terminated(), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(env.truncated(), (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(env.is_init(), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(env.final_observations()[1], 1.0f) << "the final observation is the junction's";
  EXPECT_NE(env.observations()[0], 0.0f) << "the next episode shows its cue";
}

TEST(VectorEnv, KeepsTruncationApartFromTermination) {
  NativeVectorEnv env(make_many("Pendulum-v1", 1), /*seed=*/0);
  env.reset();
  const std::vector<float> torque{0.5f};
  for (int t = 0; t < 199; ++t) {
    env.step(torque);
    ASSERT_FALSE(env.truncated()[0] || env.terminated()[0]) << t;
  }
  env.step(torque);
  EXPECT_TRUE(env.truncated()[0]);
  EXPECT_FALSE(env.terminated()[0]);
  EXPECT_TRUE(env.is_init()[0]);
}

TEST(VectorEnv, RejectsMixedSpacesAndWrongActionCounts) {
  std::vector<std::unique_ptr<Environment>> mixed;
  mixed.push_back(make_environment("CartPole-v1", {}));
  mixed.push_back(make_environment("Acrobot-v1", {}));
  EXPECT_THROW(NativeVectorEnv(std::move(mixed), 0), InvalidArgumentError);
  NativeVectorEnv env(make_many("CartPole-v1", 2), 0);
  env.reset();
  EXPECT_THROW(env.step(std::vector<float>{1.0f}), InvalidArgumentError);
  EXPECT_THROW(env.step(std::vector<float>{1.0f, 5.0f}), InvalidArgumentError);
}

TEST(Environment, StepBeforeResetIsAnError) {
  CartPole env;
  std::vector<float> observation(4);
  EXPECT_THROW(env.step(std::vector<float>{0.0f}, observation), InvalidArgumentError);
}

TEST(Environment, CartPoleTerminatesWhenThePoleFalls) {
  CartPole env;
  std::vector<float> observation(4);
  env.reset(0, observation);
  StepResult result;
  int steps = 0;
  while (!result.terminated && steps < 100) {
    result = env.step(std::vector<float>{1.0f}, observation);
    ++steps;
  }
  EXPECT_TRUE(result.terminated);
  EXPECT_FALSE(result.truncated);
  EXPECT_LT(steps, 100);
  EXPECT_GT(std::abs(observation[2]), 12 * 2 * 3.14159 / 360 - 1e-3);
}

TEST(Environment, CueRecallTMazeRewardsTheCuedTurnOnly) {
  for (int cue : {0, 1}) {
    for (int turn : {0, 1}) {
      CueRecallTMaze env(/*corridor_length=*/2);
      std::vector<float> observation(3);
      env.reset(0, observation);
      env.set_state(std::vector<double>{static_cast<double>(cue)}, observation);
      EXPECT_EQ(observation[0], cue == 0 ? 1.0f : -1.0f);
      env.step(std::vector<float>{1.0f}, observation);
      env.step(std::vector<float>{0.0f}, observation);
      const StepResult result = env.step(std::vector<float>{static_cast<float>(turn)}, observation);
      EXPECT_TRUE(result.terminated);
      EXPECT_EQ(result.reward, cue == turn ? 1.0 : -1.0);
    }
  }
}

TEST(Environment, RepeatPreviousEndsAfterTheDeckIsDealt) {
  RepeatPrevious env(/*num_decks=*/1, /*k=*/1);
  std::vector<float> observation(4);
  env.reset(5, observation);
  int steps = 0;
  double total = 0;
  StepResult result;
  int last_suit =
      static_cast<int>(std::max_element(observation.begin(), observation.end()) - observation.begin());
  while (!result.terminated) {
    result = env.step(std::vector<float>{static_cast<float>(last_suit)}, observation);
    last_suit =
        static_cast<int>(std::max_element(observation.begin(), observation.end()) - observation.begin());
    total += result.reward;
    ++steps;
  }
  EXPECT_EQ(steps, 51);
  EXPECT_NEAR(total, 1.0, 1e-9) << "always naming the last card's suit earns the full return";
}

TEST(EnvRegistry, UnknownNamesAndOptionsAreNamed) {
  try {
    make_environment("CartPole-v0", {});
    FAIL();
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("unknown environment 'CartPole-v0'"), std::string::npos);
    EXPECT_NE(std::string(error.what()).find("CartPole-v1"), std::string::npos);
  }
  try {
    make_environment("CueRecallTMaze", {{"length", 4}});
    FAIL();
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(),
                 "CueRecallTMaze has no option 'length' (options: corridor_length, max_episode_steps)");
  }
  EXPECT_THROW(make_environment("RepeatPrevious", {{"k", 52}}), InvalidArgumentError);
  EXPECT_THROW(make_environment("CueRecallTMaze", {{"corridor_length", 2.5}}), InvalidArgumentError);
  EXPECT_EQ(make_environment("CueRecallTMaze", {{"corridor_length", 7}})->time_limit(), 8);
  EXPECT_THROW(make_environment("CartPole-v1", {{"max_episode_steps", -2}}), InvalidArgumentError);
}

// max_episode_steps replaces any environment's declared time limit, as Gymnasium's
// TimeLimit does; 0 removes it, so an episode ends only when the task does.
TEST(EnvRegistry, MaxEpisodeStepsOverridesTheTimeLimitAndZeroRemovesIt) {
  auto short_pole = make_environment("CartPole-v1", {{"max_episode_steps", 3}});
  EXPECT_EQ(short_pole->time_limit(), 500);
  EXPECT_EQ(short_pole->episode_step_limit(), 3);
  std::vector<float> observation(4);
  const std::vector<float> push{0.0f};
  short_pole->reset(1, observation);
  EXPECT_FALSE(short_pole->step(push, observation).truncated);
  EXPECT_FALSE(short_pole->step(push, observation).truncated);
  EXPECT_TRUE(short_pole->step(push, observation).truncated);

  // Without a limit a balanced pole goes on past the declared 500 steps.
  auto endless = make_environment("CartPole-v1", {{"max_episode_steps", 0}});
  endless->reset(1, observation);
  for (int step = 0; step < 600; ++step) {
    const std::vector<float> balance{observation[2] + 0.5f * observation[3] > 0 ? 1.0f : 0.0f};
    const StepResult result = endless->step(balance, observation);
    ASSERT_FALSE(result.truncated || result.terminated) << "step " << step;
  }
}

TEST(PolicyFit, MismatchNamesBothShapes) {
  const auto env = make_environment("CartPole-v1", {});
  EXPECT_NO_THROW(check_policy_fits({4, true, 2}, env->observation_space(), env->action_space()));
  try {
    check_policy_fits({3, true, 2}, env->observation_space(), env->action_space());
    FAIL();
  } catch (const InvalidArgumentError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("the policy (input_size 3, categorical over 2 actions)"), std::string::npos)
        << message;
    EXPECT_NE(message.find("need input_size 4, categorical over 2 actions"), std::string::npos) << message;
  }
  const auto pendulum = make_environment("Pendulum-v1", {});
  EXPECT_THROW(check_policy_fits({3, true, 2}, pendulum->observation_space(), pendulum->action_space()),
               InvalidArgumentError);
}

TEST(EnvPlugin, LoadsTheExamplePluginWithItsOptions) {
  auto env = make_plugin_environment(KVRL_EXAMPLE_PLUGIN, {{"best_arm", 1}});
  EXPECT_EQ(env->name(), "TwoArmedBandit");
  std::vector<float> observation(1);
  env->reset(0, observation);
  EXPECT_EQ(env->step(std::vector<float>{1.0f}, observation).reward, 1.0);
  EXPECT_EQ(env->step(std::vector<float>{0.0f}, observation).reward, 0.0);
  EXPECT_THROW(make_plugin_environment(KVRL_EXAMPLE_PLUGIN, {{"arms", 3}}), InvalidArgumentError);
  // A vector of plugin environments steps like built-ins.
  std::vector<std::unique_ptr<Environment>> envs;
  envs.push_back(make_plugin_environment(KVRL_EXAMPLE_PLUGIN, {}));
  envs.push_back(make_plugin_environment(KVRL_EXAMPLE_PLUGIN, {}));
  NativeVectorEnv vector(std::move(envs), 0);
  vector.reset();
  vector.step(std::vector<float>{0.0f, 1.0f});
  EXPECT_EQ(vector.rewards(), (std::vector<double>{1.0, 0.0}));
}

TEST(EnvPlugin, RefusesMissingFilesSymbolsAndOtherAbiVersions) {
  auto message_of = [](const std::string& path) {
    try {
      make_plugin_environment(path, {});
    } catch (const InvalidArgumentError& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(
      message_of("/nonexistent/libenv.so").find("cannot load environment plugin '/nonexistent/libenv.so'"),
      std::string::npos);
  EXPECT_NE(message_of(KVRL_NO_ENTRY_PLUGIN).find("has no symbol kvrl_env_plugin_v1"), std::string::npos);
  EXPECT_NE(message_of(KVRL_WRONG_ABI_PLUGIN).find("was built for plugin ABI version 3, this kvrl needs 2"),
            std::string::npos);
}

}  // namespace
}  // namespace kvrl
