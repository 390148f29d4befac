// From config keys to the policy's options: what `kvrl train` builds for a config.
#include "launch/run_setup.h"

#include <gtest/gtest.h>

#include <string>

namespace kvrl {
namespace {

ActorCriticOptions options_for(const std::vector<std::string>& overrides) {
  const TrainConfig config = TrainConfig::parse("env:\n  name: CartPole-v1\n", overrides);
  return model_options(config, *make_configured_env(config));
}

TEST(ModelOptions, WindowAttentionEpisodesTilesTheWindowAndWholeIsOneMaskedCall) {
  EXPECT_TRUE(options_for({}).transformer.tiled_attention);
  EXPECT_TRUE(options_for({"learner.window_attention=episodes"}).transformer.tiled_attention);
  EXPECT_FALSE(options_for({"learner.window_attention=whole"}).transformer.tiled_attention);
}

TEST(ModelOptions, SizesAndPositionsComeFromTheModelKeys) {
  const ActorCriticOptions options =
      options_for({"model.hidden_size=32", "model.num_layers=3", "model.num_heads=2", "model.max_seq_len=128",
                   "model.positions=rotary", "model.dim_feedforward=48"});
  EXPECT_EQ(options.transformer.input_size, 4);  // CartPole's observation
  EXPECT_EQ(options.transformer.hidden_size, 32);
  EXPECT_EQ(options.transformer.num_layers, 3);
  EXPECT_EQ(options.transformer.num_heads, 2);
  EXPECT_EQ(options.transformer.max_seq_len, 128);
  EXPECT_EQ(options.transformer.dim_feedforward, 48);
  EXPECT_EQ(options.transformer.positions, PositionEncoding::kRotary);
  EXPECT_TRUE(options.discrete);
  EXPECT_EQ(options.num_outputs, 2);  // CartPole's two actions
}

}  // namespace
}  // namespace kvrl
