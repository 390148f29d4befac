// The learner's side of the policy's normalisers: which statistics an update feeds them,
// when, and what the reward normaliser buys (updates that do not depend on the reward scale).
#include "learner/normalizer_statistics.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/comm/local_communicator.h"
#include "learner/learner.h"
#include "tests/learner/learner_fixtures.h"

namespace kvrl {
namespace {

using fixtures::episode_of_length;
using fixtures::two_action_model;

ActorCriticOptions normalized_model() {
  ActorCriticOptions options = two_action_model(8, 16);
  options.normalize_observations = true;
  options.normalize_rewards = true;
  return options;
}

std::unique_ptr<Learner> make_learner(uint64_t seed) {
  torch::manual_seed(seed);
  LearnerOptions options;
  options.epochs = 2;
  options.minibatches = 2;
  return std::make_unique<Learner>(std::make_shared<ActorCritic>(normalized_model()), options,
                                   std::make_shared<LocalCommunicator>());
}

// Episodes acted by `model` itself (greedy values and log-probs of its own steps), so the
// learner's batch-start evaluation agrees with them exactly when it uses the same normaliser.
std::vector<Episode> acted_by(ActorCritic& model, int64_t version) {
  std::vector<Episode> episodes{episode_of_length(4), episode_of_length(6, false), episode_of_length(3)};
  for (Episode& e : episodes) {
    model.trunk().reset_cache();
    at::Generator generator = at::detail::createCPUGenerator(3);
    std::vector<float> observations = e.observations.to_floats();
    for (int64_t t = 0; t < e.length(); ++t) {
      const at::Tensor observation =
          torch::from_blob(observations.data() + 2 * t, {1, 2}, torch::kFloat).clone() * 10 + 3;
      std::copy(observation.data_ptr<float>(), observation.data_ptr<float>() + 2,
                observations.data() + 2 * t);
      const PolicyStep step = model.act(observation, torch::full({1}, t == 0, torch::kBool), generator);
      e.actions[t] = step.actions[0][0].item<float>();
      e.behaviour_log_probs[t] = step.log_probs[0].item<float>();
      e.values[t] = step.values[0].item<float>();
      e.policy_versions[t] = version;
    }
    e.observations = observations;
  }
  return episodes;
}

TEST(NormalizerStatistics, AnUpdateTrainsWithTheActingStatisticsThenMergesTheBatch) {
  auto learner = make_learner(1);
  ActorCritic& model = learner->model();
  for (int64_t version = 0; version < 3; ++version) {
    const std::vector<Episode> episodes = acted_by(model, version);
    const at::Tensor mean_before = model.observation_moments().mean.clone();
    const at::Tensor var_before = model.observation_moments().var.clone();
    const double count_before = model.observation_moments().count.item<double>();
    const UpdateStats stats = learner->update(episodes, version);
    // The batch start saw what the actor saw: same version, same normaliser.
    EXPECT_EQ(stats.same_version_steps, 13) << version;
    EXPECT_LT(stats.same_version_max_log_prob_error, 1e-5) << version;
    EXPECT_LT(stats.same_version_max_value_error, 1e-5) << version;
    // Then the batch's 13 step observations were merged in.
    RunningMoments expected{mean_before.clone(), var_before.clone(), torch::full({1}, count_before)};
    expected.merge(all_learner_moments(step_observations(episodes, 2), *std::make_shared<LocalCommunicator>(),
                                       c10::Device(c10::kCPU)));
    EXPECT_TRUE(torch::allclose(model.observation_moments().mean, expected.mean, 1e-6, 1e-6)) << version;
    EXPECT_TRUE(torch::allclose(model.observation_moments().var, expected.var, 1e-5, 1e-6)) << version;
    EXPECT_NEAR(model.observation_moments().count.item<double>(), count_before + 13, 1e-3);
  }
}

TEST(NormalizerStatistics, RowsWithANonFiniteValueAreLeftOut) {
  const at::Tensor rows = torch::tensor({{1.0f, 2.0f}, {NAN, 0.0f}, {3.0f, INFINITY}, {5.0f, 4.0f}});
  const BatchMoments moments = all_learner_moments(rows, *std::make_shared<LocalCommunicator>(), torch::kCPU);
  EXPECT_EQ(moments.count, 2);
  EXPECT_TRUE(torch::allclose(moments.mean, torch::tensor({3.0, 3.0}, torch::kDouble)));
  EXPECT_TRUE(torch::allclose(moments.var, torch::tensor({4.0, 1.0}, torch::kDouble)));
}

TEST(NormalizerStatistics, DiscountedReturnsRestartWithEachPiece) {
  Episode a = episode_of_length(3, true, 1.0f), b = episode_of_length(2, false, 2.0f);
  const at::Tensor returns = discounted_returns({a, b}, 0.5);
  EXPECT_TRUE(torch::allclose(returns.view(-1), torch::tensor({1.0, 1.5, 1.75, 2.0, 3.0}, torch::kDouble)))
      << returns;
}

// With the reward normaliser an update does not depend on the reward's scale: rewards
// 1000 times larger train the same weights, the value head's included.
TEST(NormalizerStatistics, RewardNormalizationMakesUpdatesScaleFree) {
  auto small = make_learner(7), large = make_learner(7);
  for (int update = 0; update < 3; ++update) {
    std::vector<Episode> small_batch{episode_of_length(5, true, 0.5f), episode_of_length(3, false, -1.0f)};
    std::vector<Episode> large_batch = small_batch;
    for (Episode& e : large_batch) {
      for (float& r : e.rewards) r *= 1000.0f;
    }
    torch::manual_seed(20 + update);
    small->update(small_batch);
    torch::manual_seed(20 + update);
    large->update(large_batch);
  }
  auto a = small->model().named_parameters(), b = large->model().named_parameters();
  for (const auto& item : a) {
    const std::string& name = item.key();
    if (name.rfind("return_", 0) == 0) continue;  // the statistics themselves scale
    EXPECT_TRUE(torch::allclose(item.value(), b[name], 1e-4, 1e-5)) << name;
  }
  EXPECT_NEAR(
      large->model().return_moments().var.item<double>() / small->model().return_moments().var.item<double>(),
      1e6, 1e6 * 1e-4);
  // Without it the larger rewards train other weights.
  ActorCriticOptions plain = normalized_model();
  plain.normalize_rewards = false;
  torch::manual_seed(7);
  Learner unnormalized(std::make_shared<ActorCritic>(plain), LearnerOptions{},
                       std::make_shared<LocalCommunicator>());
  torch::manual_seed(7);
  Learner unnormalized_large(std::make_shared<ActorCritic>(plain), LearnerOptions{},
                             std::make_shared<LocalCommunicator>());
  std::vector<Episode> batch{episode_of_length(5, true, 0.5f)}, batch_large = batch;
  for (float& r : batch_large.front().rewards) r *= 1000.0f;
  unnormalized.update(batch);
  unnormalized_large.update(batch_large);
  EXPECT_FALSE(torch::allclose(unnormalized.model().named_parameters()["value_head.weight"],
                               unnormalized_large.model().named_parameters()["value_head.weight"], 1e-4,
                               1e-5));
}

}  // namespace
}  // namespace kvrl
