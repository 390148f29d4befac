#include "common/model/episode_masks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/support/errors.h"

namespace kvrl {
namespace {

at::Tensor bools(std::initializer_list<int> values) {
  return torch::tensor(std::vector<int>(values)).to(torch::kBool).unsqueeze(0);
}

TEST(EpisodeMasks, PositionsRestartAtEveryIsInit) {
  EXPECT_TRUE(
      torch::equal(positions_from_is_init(bools({1, 0, 1, 0})), torch::tensor({{0, 1, 0, 1}}, torch::kLong)));
}

TEST(EpisodeMasks, WindowStartIsPositionZeroEvenWithoutIsInit) {
  EXPECT_TRUE(torch::equal(positions_from_is_init(bools({0, 0, 1, 0, 0})),
                           torch::tensor({{0, 1, 0, 1, 2}}, torch::kLong)));
}

TEST(EpisodeMasks, MaskSeparatesTwoEpisodes) {
  const at::Tensor expected = torch::tensor({1, 0, 0, 1}).to(torch::kBool).view({1, 2, 2});
  EXPECT_TRUE(torch::equal(segment_causal_mask_from_is_init(bools({0, 1})), expected));
}

TEST(EpisodeMasks, RejectsNonBoolIsInit) {
  const at::Tensor floats = torch::ones({1, 4});
  EXPECT_THROW(positions_from_is_init(floats), InvalidArgumentError);
  try {
    segment_causal_mask_from_is_init(floats);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "is_init must be a boolean tensor, got torch.float32.");
  }
}

TEST(EpisodeMasks, RejectsZeroDimIsInit) {
  EXPECT_THROW(positions_from_is_init(torch::tensor(true)), InvalidArgumentError);
}

class EpisodeMaskProperties : public ::testing::Test {
 protected:
  void SetUp() override {
    torch::manual_seed(0);
    is_init_ = torch::rand({3, 5, 17}) < 0.2;
    mask_ = segment_causal_mask_from_is_init(is_init_);
    segment_ = is_init_.to(torch::kLong).cumsum(-1);
  }
  at::Tensor is_init_, mask_, segment_;
};

TEST_F(EpisodeMaskProperties, NeverAttendsAcrossEpisodes) {
  const at::Tensor different = segment_.unsqueeze(-1) != segment_.unsqueeze(-2);
  EXPECT_FALSE(mask_.masked_select(different).any().item<bool>());
}

TEST_F(EpisodeMaskProperties, IsCausal) {
  const at::Tensor future = torch::ones({17, 17}, torch::kBool).triu(1).expand_as(mask_);
  EXPECT_FALSE(mask_.masked_select(future).any().item<bool>());
}

TEST_F(EpisodeMaskProperties, DiagonalIsAlwaysTrue) {
  EXPECT_TRUE(mask_.diagonal(0, -2, -1).all().item<bool>());
}

TEST_F(EpisodeMaskProperties, AttendsToEveryEarlierStepOfTheSameEpisode) {
  const at::Tensor same_past = (segment_.unsqueeze(-1) == segment_.unsqueeze(-2)) &
                               torch::ones({17, 17}, torch::kBool).tril().expand_as(mask_);
  EXPECT_TRUE(torch::equal(mask_, same_past));
}

TEST_F(EpisodeMaskProperties, PositionsCountStepsSinceTheLastReset) {
  const at::Tensor positions = positions_from_is_init(is_init_);
  auto init = is_init_.accessor<bool, 3>();
  auto pos = positions.accessor<int64_t, 3>();
  for (int64_t a = 0; a < 3; ++a) {
    for (int64_t b = 0; b < 5; ++b) {
      int64_t expected = 0;
      for (int64_t t = 0; t < 17; ++t) {
        expected = (t == 0 || init[a][b][t]) ? 0 : expected + 1;
        ASSERT_EQ(pos[a][b][t], expected) << "at " << a << "," << b << "," << t;
      }
    }
  }
}

}  // namespace
}  // namespace kvrl
