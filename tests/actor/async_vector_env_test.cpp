// NativeVectorEnv's stepping modes: in the caller's thread, on a pool of threads in
// lockstep, and asynchronously (send/wait_ready), with slow environments.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actor/env_registry.h"
#include "actor/vector_env.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

std::unique_ptr<NativeVectorEnv> cartpoles(int count, NativeStepping stepping) {
  std::vector<std::unique_ptr<Environment>> envs(count);
  for (auto& env : envs) env = make_environment("CartPole-v1", {});
  return std::make_unique<NativeVectorEnv>(std::move(envs), /*seed=*/11, std::move(stepping));
}

// Each environment's own sequence of observations, rewards and ends.
using Trajectories = std::map<int64_t, std::vector<float>>;

// Steps every environment `steps` times, each with actions that depend only on its own step
// count, sending whichever environments are ready; returns each one's trajectory.
Trajectories play(NativeVectorEnv& env, int steps) {
  Trajectories seen;
  std::vector<int64_t> done(env.num_envs(), 0);
  env.reset();
  std::vector<int64_t> ready;
  for (int64_t i = 0; i < env.num_envs(); ++i) ready.push_back(i);
  int64_t in_flight = 0;
  while (true) {
    std::vector<int64_t> sending;
    std::vector<float> actions;
    for (const int64_t i : ready) {
      if (done[i] == steps) continue;
      sending.push_back(i);
      actions.push_back(static_cast<float>((done[i] * 7 + i) % 3 == 0));
    }
    in_flight += static_cast<int64_t>(sending.size());
    if (in_flight == 0) break;
    env.send(sending, actions);
    ready = env.wait_ready();
    in_flight -= static_cast<int64_t>(ready.size());
    for (const int64_t i : ready) {
      ++done[i];
      const auto row = env.observations().begin() + i * env.observation_size();
      seen[i].insert(seen[i].end(), row, row + env.observation_size());
      seen[i].push_back(static_cast<float>(env.rewards()[i]));
      seen[i].push_back(env.terminated()[i] + 2 * env.truncated()[i] + 4 * env.is_init()[i]);
    }
  }
  return seen;
}

NativeStepping slow_env_last(bool asynchronous, double slow_s) {
  NativeStepping stepping;
  stepping.asynchronous = asynchronous;
  stepping.threads = 3;
  stepping.step_delays_s = {0, 0, slow_s};
  return stepping;
}

TEST(AsyncVectorEnv, EveryWayOfSteppingGivesEachEnvironmentTheSameEpisodes) {
  const Trajectories in_thread = play(*cartpoles(3, {}), 150);
  NativeStepping pool;
  pool.threads = 2;
  EXPECT_EQ(in_thread, play(*cartpoles(3, pool), 150));
  EXPECT_EQ(in_thread, play(*cartpoles(3, slow_env_last(/*asynchronous=*/true, 0.001)), 150));
  ASSERT_EQ(in_thread.size(), 3u);
  EXPECT_NE(in_thread.at(0), in_thread.at(1));
}

// The environments an asynchronous env returns first are the fast ones: while the slow one
// steps once, the others step many times.
TEST(AsyncVectorEnv, FastEnvironmentsDoNotWaitForASlowOne) {
  const auto env = cartpoles(3, slow_env_last(/*asynchronous=*/true, 0.05));
  env->reset();
  std::vector<int64_t> steps(3, 0);
  std::vector<int64_t> ready{0, 1, 2};
  while (steps[2] < 2) {
    env->send(ready, std::vector<float>(ready.size(), 0.0f));
    ready = env->wait_ready();
    for (const int64_t i : ready) ++steps[i];
  }
  EXPECT_GT(steps[0], 10 * steps[2]) << steps[0] << " steps of a fast environment";
  EXPECT_GT(steps[1], 10 * steps[2]);
}

TEST(AsyncVectorEnv, LockstepOnAPoolWaitsForEveryEnvironment) {
  const auto env = cartpoles(3, slow_env_last(/*asynchronous=*/false, 0.002));
  env->reset();
  for (int t = 0; t < 5; ++t) {
    env->send(std::vector<int64_t>{0, 1, 2}, std::vector<float>(3, 1.0f));
    // In index order, though environment 2 finishes last and 0 and 1 in either order.
    EXPECT_EQ(env->wait_ready(), (std::vector<int64_t>{0, 1, 2}));
  }
}

void expect_send_refused(NativeVectorEnv& env, const std::vector<int64_t>& envs, const std::string& message) {
  try {
    env.send(envs, std::vector<float>(envs.size(), 0.0f));
    FAIL() << "expected InvalidArgumentError: " << message;
  } catch (const InvalidArgumentError& error) {
    EXPECT_EQ(error.what(), message);
  }
}

TEST(AsyncVectorEnv, RefusesEnvironmentsThatAreNotThereOrStillStepping) {
  const auto env = cartpoles(3, slow_env_last(/*asynchronous=*/true, 0.05));
  env->reset();
  expect_send_refused(*env, {3}, "VectorEnv::send: environment 3 is not in [0, 3)");
  env->send(std::vector<int64_t>{2}, std::vector<float>{0.0f});
  expect_send_refused(*env, {0, 2},
                      "VectorEnv::send: environment 2 is still stepping; send it again after wait_ready() "
                      "returned it");
  EXPECT_EQ(env->wait_ready(), (std::vector<int64_t>{2}));
}

TEST(AsyncVectorEnv, AnActionOutsideTheSpaceIsReportedOnTheCallersThread) {
  const auto env = cartpoles(3, slow_env_last(/*asynchronous=*/true, 0));
  env->reset();
  env->send(std::vector<int64_t>{1}, std::vector<float>{5.0f});
  try {
    env->wait_ready();
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("CartPole-v1"), std::string::npos) << error.what();
  }
}

TEST(AsyncVectorEnv, InvalidSteppingOptionsAreRefusedNamingThem) {
  NativeStepping stepping;
  stepping.min_ready = 0;
  EXPECT_THROW(cartpoles(2, stepping), InvalidArgumentError);
  stepping = {};
  stepping.threads = -1;
  EXPECT_THROW(cartpoles(2, stepping), InvalidArgumentError);
  stepping = {};
  stepping.step_delays_s = {0.1};
  try {
    cartpoles(2, stepping);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "NativeVectorEnv: 1 step delays for 2 environments");
  }
}

}  // namespace
}  // namespace kvrl
