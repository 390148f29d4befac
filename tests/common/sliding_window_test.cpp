// The sliding-window cache and rotary positions (issue #19): a step attends to the last W
// steps of its context however long the episode, the cached path agrees with the window
// path under the banded mask, and a window that starts num_layers * (W - 1) steps before
// a token computes that token exactly (the reach a fragment's prefix must cover).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/model/causal_transformer.h"
#include "common/model/episode_masks.h"
#include "common/model/transformer_module.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

constexpr int64_t kWindow = 4;
constexpr int64_t kLayers = 2;

TransformerModuleOptions sliding_options(int64_t window = kWindow) {
  TransformerModuleOptions options;
  options.input_size = 3;
  options.hidden_size = 16;
  options.num_layers = kLayers;
  options.num_heads = 2;
  options.max_seq_len = 8;
  options.positions = PositionEncoding::kRotary;
  options.attention_window = window;
  return options;
}

at::Tensor starts_only(int64_t batch, int64_t steps) {
  at::Tensor init = torch::zeros({batch, steps}, torch::kBool);
  init.select(1, 0).fill_(true);
  return init;
}

at::Tensor step_through(TransformerModule& module, const at::Tensor& episodes) {
  std::vector<at::Tensor> outputs;
  for (int64_t t = 0; t < episodes.size(1); ++t) {
    outputs.push_back(
        module.step(episodes.select(1, t), torch::full({episodes.size(0)}, t == 0, torch::kBool)));
  }
  return torch::stack(outputs, 1);
}

class SlidingWindowTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(SlidingWindowTest, CachedStepsMatchTheBandedWindowFarPastMaxSeqLen) {
  TransformerModule module(sliding_options());
  const at::Tensor episodes = torch::randn({3, 40, 3});  // five times max_seq_len
  const at::Tensor stepped = step_through(module, episodes);
  const at::Tensor windowed = module.window(episodes, starts_only(3, 40));
  EXPECT_TRUE(torch::allclose(stepped, windowed, 1e-5, 1e-5))
      << (stepped - windowed).abs().max().item<double>();
  // The ring holds W slots per stream whatever the episode's length.
  EXPECT_EQ(module.stream_positions()[0].item<int64_t>(), 40);
}

TEST_F(SlidingWindowTest, StaticShapeStepsSlideLikeEagerSteps) {
  TransformerModuleOptions options = sliding_options();
  options.static_shape_steps = true;
  TransformerModule module(options);
  const at::Tensor episodes = torch::randn({2, 30, 3});
  const at::Tensor stepped = step_through(module, episodes);
  const at::Tensor windowed = module.window(episodes, starts_only(2, 30));
  EXPECT_TRUE(torch::allclose(stepped, windowed, 1e-5, 1e-5));
}

// Every layer looks W - 1 steps further back through the keys of the layer below, so a
// window cut `reach` = num_layers * (W - 1) steps before a token computes it as the whole
// history does, and one step less does not.
TEST_F(SlidingWindowTest, AWindowCutOneReachEarlierIsExactAndOneStepLessIsNot) {
  TransformerModule module(sliding_options());
  const int64_t steps = 30;
  const int64_t reach = kLayers * (kWindow - 1);
  const at::Tensor episode = torch::randn({1, steps, 3});
  const at::Tensor full = module.window(episode, starts_only(1, steps));
  const int64_t token = 20;
  auto from = [&](int64_t start) {
    const at::Tensor cut = episode.narrow(1, start, steps - start);
    return module.window(cut, starts_only(1, steps - start)).select(1, token - start);
  };
  EXPECT_TRUE(torch::allclose(from(token - reach), full.select(1, token), 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(from(token - reach + 1), full.select(1, token), 1e-4, 1e-4));
}

TEST_F(SlidingWindowTest, RotaryWindowsDependOnDistancesOnly) {
  TransformerModule module(sliding_options(/*window=*/8));
  const at::Tensor features = torch::randn({1, 6, 3});
  const at::Tensor near = torch::arange(6, torch::kLong).unsqueeze(0);
  torch::NoGradGuard no_grad;
  const at::Tensor a = module.transformer().forward(features, near, std::nullopt, nullptr).out;
  // Positions of millions stay exact: the angles are computed in float64.
  const at::Tensor b = module.transformer().forward(features, near + 1000000, std::nullopt, nullptr).out;
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-5)) << (a - b).abs().max().item<double>();
}

// Rebuilding a ring from each stream's last steps continues as stepping all of them did,
// for streams shorter and longer than the window.
TEST_F(SlidingWindowTest, PrefillOfTheLastReachStepsContinuesLikeTheFullHistory) {
  TransformerModule module(sliding_options());
  const int64_t reach = kLayers * (kWindow - 1);
  const at::Tensor episodes = torch::randn({3, 25, 3});
  const std::vector<int64_t> lengths{2, 11, 24};
  const at::Tensor full = module.window(episodes, starts_only(3, 25));
  // Stream b's last min(length, reach) steps, left-aligned and padded.
  at::Tensor context = torch::zeros({3, reach, 3});
  std::vector<int64_t> kept;
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t n = std::min(lengths[b], reach);
    context[b].narrow(0, 0, n).copy_(episodes[b].narrow(0, lengths[b] - n, n));
    kept.push_back(n);
  }
  module.prefill(context, torch::tensor(kept, torch::kLong));
  at::Tensor next = torch::stack({episodes[0][2], episodes[1][11], episodes[2][24]});
  const at::Tensor out = module.step(next, torch::zeros({3}, torch::kBool));
  for (int64_t b = 0; b < 3; ++b) {
    EXPECT_TRUE(torch::allclose(out[b], full[b][lengths[b]], 1e-5, 1e-5)) << "stream " << b;
  }
}

TEST_F(SlidingWindowTest, TheWindowMaskIsTheSegmentMaskBandedToWSteps) {
  const at::Tensor init = torch::tensor({{true, false, false, false, true, false}});
  const at::Tensor mask = segment_causal_mask_from_is_init(init, /*window=*/2)[0];
  EXPECT_TRUE(mask[3][2].item<bool>());
  EXPECT_FALSE(mask[3][1].item<bool>());  // three steps back
  EXPECT_FALSE(mask[4][3].item<bool>());  // another segment
  EXPECT_TRUE(mask[5][4].item<bool>());
}

TEST_F(SlidingWindowTest, RejectsASlidingWindowWithLearnedPositionsAndOneWiderThanMaxSeqLen) {
  TransformerModuleOptions learned = sliding_options();
  learned.positions = PositionEncoding::kLearned;
  try {
    TransformerModule module(learned);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("needs rotary positions"), std::string::npos) << error.what();
  }
  try {
    TransformerModule module(sliding_options(/*window=*/9));
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("attention_window (9) must be in [0, max_seq_len=8]"),
              std::string::npos)
        << error.what();
  }
}

TEST_F(SlidingWindowTest, WholeContextRotaryStillStopsAtMaxSeqLen) {
  TransformerModule module(sliding_options(/*window=*/0));
  const at::Tensor episodes = torch::randn({1, 9, 3});
  EXPECT_THROW(step_through(module, episodes), SequenceTooLongError);
}

}  // namespace
}  // namespace kvrl
