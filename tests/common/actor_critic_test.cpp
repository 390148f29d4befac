#include "common/actor_critic.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/errors.h"

namespace kvrl {
namespace {

ActorCriticOptions small_policy() {
  ActorCriticOptions options;
  options.transformer.input_size = 4;
  options.transformer.hidden_size = 32;
  options.transformer.num_heads = 4;
  options.transformer.max_seq_len = 32;
  options.num_outputs = 3;
  return options;
}

// Two policies with the same weights, the second under bf16 autocast.
class ActorCriticAutocast : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(5);
    torch::NoGradGuard no_grad;
    auto from = full.parameters();
    auto to = bf16.parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
    bf16.set_autocast(at::kBFloat16);
  }
  ActorCritic full{small_policy()};
  ActorCritic bf16{small_policy()};
};

TEST_F(ActorCriticAutocast, StepsStayCloseToFloat32AndKeepTheirContextAcrossUpdates) {
  const at::Tensor observations = torch::randn({10, 3, 4});
  const at::Tensor starts = torch::zeros({3}, torch::kBool);
  at::Generator generator = at::detail::createCPUGenerator(1);
  bool differs = false;
  for (int64_t t = 0; t < 10; ++t) {
    const at::Tensor is_init = t == 0 ? torch::ones({3}, torch::kBool) : starts;
    const PolicyStep reference = full.act(observations[t], is_init, generator, /*greedy=*/true);
    const PolicyStep step = bf16.act(observations[t], is_init, generator, /*greedy=*/true);
    EXPECT_EQ(step.values.scalar_type(), torch::kFloat);
    EXPECT_EQ(step.log_probs.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::allclose(step.values, reference.values, /*rtol=*/0, /*atol=*/5e-2)) << t;
    EXPECT_TRUE(torch::allclose(step.log_probs, reference.log_probs, /*rtol=*/0, /*atol=*/5e-2)) << t;
    differs = differs || !torch::allclose(step.values, reference.values, /*rtol=*/0, /*atol=*/1e-6);
  }
  EXPECT_TRUE(differs) << "bf16 autocast should change the values at float32 precision";
  // Rebuilt under the same autocast, the cache keeps its dtype: the next step continues
  // every stream (position 10) instead of restarting it for a dtype change.
  bf16.mark_weight_update_keeping_context(observations.transpose(0, 1).contiguous(), torch::full({3}, 10, torch::kLong));
  bf16.act(observations[9], starts, generator, /*greedy=*/true);
  EXPECT_TRUE(torch::equal(bf16.trunk().stream_positions(), torch::full({3}, 11, torch::kLong)))
      << bf16.trunk().stream_positions();
}

TEST_F(ActorCriticAutocast, WindowForwardRunsInBf16AndTrainsInFloat32) {
  const at::Tensor observations = torch::randn({2, 12, 4});
  at::Tensor is_init = torch::zeros({2, 12}, torch::kBool);
  is_init.select(1, 0).fill_(true);
  is_init[1][6] = true;
  const PolicyWindow reference = full.evaluate(observations, is_init);
  const PolicyWindow window = bf16.evaluate(observations, is_init);
  EXPECT_EQ(window.policy.scalar_type(), torch::kFloat);
  EXPECT_EQ(window.values.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(window.values, reference.values, /*rtol=*/0, /*atol=*/5e-2));
  EXPECT_FALSE(torch::allclose(window.values, reference.values, /*rtol=*/0, /*atol=*/1e-6));
  (window.values.pow(2).mean() + bf16.entropy(window).mean()).backward();
  for (const auto& parameter : bf16.parameters()) {
    ASSERT_TRUE(parameter.grad().defined());
    EXPECT_EQ(parameter.grad().scalar_type(), torch::kFloat);
    EXPECT_TRUE(parameter.grad().isfinite().all().item<bool>());
  }
}

TEST(ActorCritic, AutocastAcceptsOnlyBfloat16) {
  ActorCritic policy(small_policy());
  try {
    policy.set_autocast(at::kHalf);
    FAIL() << "float16 was accepted";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("autocast dtype Half is not supported: use bfloat16"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(policy.autocast(), std::nullopt);
  policy.set_autocast(at::kBFloat16);
  EXPECT_EQ(policy.autocast(), std::optional<c10::ScalarType>(at::kBFloat16));
  policy.set_autocast(std::nullopt);
  EXPECT_EQ(policy.autocast(), std::nullopt);
}

}  // namespace
}  // namespace kvrl
