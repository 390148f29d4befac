// The policy's normalisers: running statistics merged as Gymnasium's RunningMeanStd
// merges them, and observations normalised alike on the cached-step, window and
// context-rebuild paths, with the statistics travelling as parameters without gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/model/actor_critic.h"
#include "common/model/running_moments.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

ActorCriticOptions normalized_policy() {
  ActorCriticOptions options;
  options.transformer.input_size = 3;
  options.transformer.hidden_size = 16;
  options.transformer.num_heads = 2;
  options.transformer.max_seq_len = 16;
  options.num_outputs = 2;
  options.discrete = false;
  options.normalize_observations = true;
  options.observation_clip = 5.0;
  options.normalize_rewards = true;
  return options;
}

BatchMoments moments_of(const at::Tensor& rows) {
  const at::Tensor x = rows.to(at::kDouble);
  return {static_cast<double>(x.size(0)), x.mean(0), x.var(0, /*unbiased=*/false)};
}

TEST(RunningMoments, MergingBatchesGivesTheMomentsOfAllTheirRows) {
  torch::manual_seed(3);
  ActorCritic policy(normalized_policy());
  RunningMoments& moments = policy.observation_moments();
  const at::Tensor first = torch::randn({40, 3}) * 3 + 7, second = torch::randn({25, 3}) * 0.5 - 2;
  moments.merge(moments_of(first));
  moments.merge(moments_of(second));
  moments.merge(BatchMoments{});  // an empty batch changes nothing
  // The prior (mean 0, var 1, count 1e-4) weighs 1e-4 of a row, as in Gymnasium.
  const at::Tensor all = torch::cat({first, second}).to(at::kDouble);
  const double n = 65 + kInitialMomentCount;
  const at::Tensor mean = all.sum(0) / n;
  const at::Tensor var = ((all - mean).pow(2).sum(0) + kInitialMomentCount * (1 + mean.pow(2))) / n;
  EXPECT_TRUE(torch::allclose(moments.mean.to(at::kDouble), mean, 1e-6, 1e-5)) << moments.mean << mean;
  EXPECT_TRUE(torch::allclose(moments.var.to(at::kDouble), var, 1e-5, 1e-5)) << moments.var << var;
  EXPECT_NEAR(moments.count.item<double>(), n, 1e-3);
}

TEST(RunningMoments, NormalizesAndClips) {
  ActorCritic policy(normalized_policy());
  RunningMoments& moments = policy.observation_moments();
  {
    torch::NoGradGuard no_grad;
    moments.mean.copy_(torch::tensor({1.0f, -2.0f, 0.0f}));
    moments.var.copy_(torch::tensor({4.0f, 0.25f, 1e-12f}));
  }
  const at::Tensor normalized = moments.normalize(torch::tensor({{3.0f, -2.5f, 1.0f}}), 5.0);
  EXPECT_TRUE(torch::allclose(normalized, torch::tensor({{1.0f, -1.0f, 5.0f}}), 1e-5, 1e-5)) << normalized;
}

TEST(ObservationNormalization, StatisticsAreParametersWithoutGradients) {
  ActorCritic policy(normalized_policy());
  const auto parameters = policy.named_parameters();
  for (const char* name : {"observation_mean", "observation_var", "observation_count", "return_mean",
                           "return_var", "return_count"}) {
    ASSERT_TRUE(parameters.contains(name)) << name;
    EXPECT_FALSE(parameters[name].requires_grad()) << name;
  }
  ActorCriticOptions plain = normalized_policy();
  plain.normalize_observations = plain.normalize_rewards = false;
  EXPECT_FALSE(ActorCritic(plain).named_parameters().contains("observation_mean"));
  plain.normalize_observations = true;
  plain.observation_clip = 0;
  EXPECT_THROW(ActorCritic{plain}, InvalidArgumentError);
}

// The cached step, the context rebuild and the window see the same normalised inputs:
// each equals the unnormalised policy fed (x - mean) / std by hand.
TEST(ObservationNormalization, EveryPathNormalizesAlike) {
  torch::manual_seed(11);
  ActorCritic normalized(normalized_policy());
  ActorCriticOptions plain_options = normalized_policy();
  plain_options.normalize_observations = plain_options.normalize_rewards = false;
  ActorCritic plain(plain_options);
  torch::NoGradGuard no_grad;
  auto trained = plain.named_parameters();
  for (const auto& item : normalized.named_parameters()) {
    if (trained.contains(item.key())) trained[item.key()].copy_(item.value());
  }
  RunningMoments& moments = normalized.observation_moments();
  moments.mean.copy_(torch::tensor({5.0f, -1.0f, 0.5f}));
  moments.var.copy_(torch::tensor({9.0f, 0.01f, 2.0f}));
  const at::Tensor observations = torch::randn({2, 6, 3}) * 3 + 4;
  const at::Tensor by_hand = moments.normalize(observations, 5.0);
  at::Tensor is_init = torch::zeros({2, 6}, torch::kBool);
  is_init.select(1, 0).fill_(true);

  const PolicyWindow window = normalized.evaluate(observations, is_init);
  const PolicyWindow reference = plain.evaluate(by_hand, is_init);
  EXPECT_TRUE(torch::allclose(window.policy, reference.policy, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(window.values, reference.values, 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(window.values, plain.evaluate(observations, is_init).values, 1e-3, 1e-3))
      << "the statistics must matter";

  at::Generator generator = at::detail::createCPUGenerator(1);
  for (int64_t t = 0; t < 3; ++t) {
    const PolicyStep step =
        normalized.act(observations.select(1, t), is_init.select(1, t), generator, /*greedy=*/true);
    EXPECT_TRUE(torch::allclose(step.values, window.values.select(1, t), 1e-5, 1e-5)) << t;
  }
  // New weights, the context rebuilt from the raw observations so far: the steps go on
  // as the window does.
  normalized.mark_weight_update_keeping_context(observations.narrow(1, 0, 3),
                                                torch::full({2}, 3, torch::kLong));
  for (int64_t t = 3; t < 6; ++t) {
    const PolicyStep step =
        normalized.act(observations.select(1, t), is_init.select(1, t), generator, /*greedy=*/true);
    EXPECT_TRUE(torch::allclose(step.values, window.values.select(1, t), 1e-5, 1e-5)) << t;
  }
}

}  // namespace
}  // namespace kvrl
