#include "common/model/actor_critic.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <string>

#include "common/support/errors.h"

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

// An actor with actor.on_weight_update=restart restarts every stream's context after
// new weights and records is_init on that step; the learner's window forward over the
// recorded is_init must then see what the acting policy saw.
TEST(ActorCritic, AWindowWithTheRecordedRestartReproducesTheSteps) {
  torch::manual_seed(9);
  ActorCritic policy(small_policy());
  torch::NoGradGuard no_grad;
  const int64_t steps = 12, restart = 5, streams = 3;
  const at::Tensor observations = torch::randn({streams, steps, 4});
  at::Tensor recorded_is_init = torch::zeros({streams, steps}, torch::kBool);
  at::Generator generator = at::detail::createCPUGenerator(1);
  std::vector<at::Tensor> acted;
  for (int64_t t = 0; t < steps; ++t) {
    if (t == restart) policy.mark_weight_update();  // the same weights: only the restart matters
    const bool starts = t == 0 || t == restart;
    const at::Tensor is_init = torch::full({streams}, starts, torch::kBool);
    recorded_is_init.select(1, t).fill_(starts);
    acted.push_back(policy.act(observations.select(1, t), is_init, generator, /*greedy=*/true).values);
  }
  const at::Tensor acted_values = torch::stack(acted, 1);
  const at::Tensor window_values = policy.evaluate(observations, recorded_is_init).values;
  EXPECT_TRUE(torch::allclose(window_values, acted_values, 1e-5, 1e-5)) << window_values - acted_values;
  // Without the restart the window attends over the whole episode and differs after it.
  at::Tensor episode_start_only = torch::zeros({streams, steps}, torch::kBool);
  episode_start_only.select(1, 0).fill_(true);
  const at::Tensor whole_episode = policy.evaluate(observations, episode_start_only).values;
  EXPECT_TRUE(
      torch::allclose(whole_episode.narrow(1, 0, restart), acted_values.narrow(1, 0, restart), 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(whole_episode.narrow(1, restart, steps - restart),
                               acted_values.narrow(1, restart, steps - restart), 1e-3, 1e-3));
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
  bf16.mark_weight_update_keeping_context(observations.transpose(0, 1).contiguous(),
                                          torch::full({3}, 10, torch::kLong));
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
    EXPECT_NE(std::string(error.what()).find("autocast dtype Half is not supported: use bfloat16"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(policy.autocast(), std::nullopt);
  policy.set_autocast(at::kBFloat16);
  EXPECT_EQ(policy.autocast(), std::optional<c10::ScalarType>(at::kBFloat16));
  policy.set_autocast(std::nullopt);
  EXPECT_EQ(policy.autocast(), std::nullopt);
}

ActorCriticOptions mlp_critic_policy() {
  ActorCriticOptions options = small_policy();
  options.critic = CriticKind::kMlp;
  options.critic_hidden_size = 16;
  return options;
}

// The MLP critic values an observation the same whatever came before it, on the cached
// path and in windows alike; the trunk's value head does not.
TEST(ActorCritic, MlpCriticValuesSeeOnlyTheCurrentObservation) {
  torch::manual_seed(3);
  ActorCritic mlp(mlp_critic_policy());
  ActorCritic trunk(small_policy());
  torch::NoGradGuard no_grad;
  const int64_t steps = 6;
  const at::Tensor history = torch::randn({2, steps, 4});
  history[1][steps - 1].copy_(history[0][steps - 1]);  // two histories, the same last observation
  at::Tensor is_init = torch::zeros({2, steps}, torch::kBool);
  is_init.select(1, 0).fill_(true);
  const at::Tensor mlp_values = mlp.evaluate(history, is_init).values;
  const at::Tensor trunk_values = trunk.evaluate(history, is_init).values;
  EXPECT_FLOAT_EQ(mlp_values[0][steps - 1].item<float>(), mlp_values[1][steps - 1].item<float>());
  EXPECT_GT((trunk_values[0][steps - 1] - trunk_values[1][steps - 1]).abs().item<float>(), 1e-4);
  at::Generator generator = at::detail::createCPUGenerator(1);
  for (int64_t t = 0; t < steps; ++t) {
    const PolicyStep step = mlp.act(history.select(1, t), is_init.select(1, t), generator, /*greedy=*/true);
    EXPECT_TRUE(torch::allclose(step.values, mlp_values.select(1, t), 1e-5, 1e-5)) << t;
  }
}

// Each loss trains only its own network: the value loss reaches the critic and not the
// trunk or the policy head, the policy loss the reverse.
TEST(ActorCritic, MlpCriticSeparatesThePolicyAndValueGradients) {
  torch::manual_seed(4);
  ActorCritic policy(mlp_critic_policy());
  const at::Tensor observations = torch::randn({2, 5, 4});
  at::Tensor is_init = torch::zeros({2, 5}, torch::kBool);
  is_init.select(1, 0).fill_(true);
  const auto gradient_norms = [&](const at::Tensor& loss) {
    policy.zero_grad();
    loss.backward();
    std::map<std::string, double> norms;
    for (const auto& item : policy.named_parameters()) {
      const std::string network = item.key().substr(0, item.key().find('.'));
      const at::Tensor grad = item.value().grad();
      norms[network] += grad.defined() ? grad.norm().item<double>() : 0.0;
    }
    return norms;
  };
  const PolicyWindow window = policy.evaluate(observations, is_init);
  auto norms = gradient_norms(window.values.pow(2).sum());
  EXPECT_GT(norms["critic"], 0);
  EXPECT_EQ(norms["trunk"], 0);
  EXPECT_EQ(norms["policy_head"], 0);
  norms = gradient_norms(policy.evaluate(observations, is_init).policy.sum());
  EXPECT_GT(norms["trunk"], 0);
  EXPECT_EQ(norms["critic"], 0);
  // The trunk's value head, for contrast: its value loss does train the trunk.
  ActorCritic shared(small_policy());
  const at::Tensor shared_loss = shared.evaluate(observations, is_init).values.pow(2).sum();
  shared_loss.backward();
  EXPECT_GT(shared.trunk().parameters()[0].grad().norm().item<double>(), 0);
}

TEST(ActorCritic, MlpCriticRefusesAnImageEncoder) {
  ActorCriticOptions options = mlp_critic_policy();
  options.image_encoder = ImageEncoderOptions{{8, 8, 1}, {{4, 3, 1}}, 8};
  options.transformer.input_size = 8;
  try {
    ActorCritic policy(options);
    FAIL() << "an MLP critic was built beside an image encoder";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("the MLP critic reads the flat observation"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace kvrl
