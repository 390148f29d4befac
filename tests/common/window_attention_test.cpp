// WindowAttention (common/model/window_attention.h): tile by tile over the key ranges a
// window mask allows, equal to one whole-window attention call in outputs and gradients,
// on packings of many short and a few long episodes, with and without a sliding band.
#include "common/model/window_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "common/model/causal_transformer.h"
#include "common/model/episode_masks.h"
#include "common/model/transformer_block.h"
#include "common/model/transformer_module.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

// Rows packed with episodes of random lengths in [shortest, longest], each row ending in
// padding (every padding token starts its own segment, as pack_windows marks it).
at::Tensor packed_is_init(int64_t rows, int64_t t, int64_t shortest, int64_t longest, uint64_t seed) {
  torch::manual_seed(seed);
  at::Tensor is_init = torch::zeros({rows, t}, torch::kBool);
  for (int64_t row = 0; row < rows; ++row) {
    int64_t column = 0;
    while (true) {
      const int64_t length = torch::randint(shortest, longest + 1, {1}).item<int64_t>();
      if (column + length > t) break;
      is_init[row][column] = true;
      column += length;
    }
    if (column < t) is_init[row].narrow(0, column, t - column).fill_(true);
  }
  return is_init;
}

struct AttentionResult {
  at::Tensor output, query_grad, key_grad, value_grad;
};

AttentionResult attend(const at::Tensor& mask, const std::optional<WindowAttention>& tiled, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t b = mask.size(0);
  const int64_t t = mask.size(1);
  at::Tensor q = torch::randn({b, 4, t, 16}).requires_grad_(true);
  at::Tensor k = torch::randn({b, 4, t, 16}).requires_grad_(true);
  at::Tensor v = torch::randn({b, 4, t, 16}).requires_grad_(true);
  const at::Tensor out =
      tiled ? (*tiled)(q, k, v) : at::scaled_dot_product_attention(q, k, v, mask.unsqueeze(1));
  // A weighting that differs per token, so that a gradient routed to the wrong token shows.
  (out * torch::linspace(-1, 1, t).view({1, 1, t, 1})).pow(2).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void expect_tiled_equals_whole(const at::Tensor& mask, int64_t tile) {
  const std::optional<WindowAttention> tiled = WindowAttention::plan(mask, tile);
  ASSERT_TRUE(tiled.has_value());
  const AttentionResult whole = attend(mask, std::nullopt, 11);
  const AttentionResult by_tiles = attend(mask, tiled, 11);
  EXPECT_TRUE(torch::allclose(by_tiles.output, whole.output, 1e-5, 1e-5)) << "tile " << tile;
  EXPECT_TRUE(torch::allclose(by_tiles.query_grad, whole.query_grad, 1e-5, 1e-5)) << "tile " << tile;
  EXPECT_TRUE(torch::allclose(by_tiles.key_grad, whole.key_grad, 1e-5, 1e-5)) << "tile " << tile;
  EXPECT_TRUE(torch::allclose(by_tiles.value_grad, whole.value_grad, 1e-5, 1e-5)) << "tile " << tile;
}

TEST(WindowAttention, EqualsTheWholeWindowOnManyShortAndAFewLongEpisodes) {
  at::Tensor is_init = packed_is_init(4, 203, 3, 30, 1);
  // Two rows hold one long episode each (and padding), as late in training.
  is_init[1].zero_();
  is_init[1][0] = true;
  is_init[2].zero_();
  is_init[2][0] = true;
  is_init[2].narrow(0, 150, 53).fill_(true);
  for (int64_t tile : {1, 8, 32, 64, 256})
    expect_tiled_equals_whole(segment_causal_mask_from_is_init(is_init), tile);
}

TEST(WindowAttention, EqualsTheWholeWindowUnderASlidingBand) {
  const at::Tensor is_init = packed_is_init(3, 160, 10, 120, 2);
  for (int64_t tile : {8, 32}) expect_tiled_equals_whole(segment_causal_mask_from_is_init(is_init, 24), tile);
}

TEST(WindowAttention, EqualsTheWholeWindowOnAMaskOfScatteredKeys) {
  // Not a block-diagonal mask: each tile's range spans keys some of its queries may not see.
  torch::manual_seed(5);
  at::Tensor mask = torch::rand({2, 70, 70}) < 0.3;
  mask.diagonal(0, 1, 2).fill_(true);
  expect_tiled_equals_whole(mask, 16);
}

TEST(WindowAttention, ScoresLittleMoreThanTheEpisodesNeed) {
  // Early CartPole: episodes of 10-30 steps in rows of 512.
  const at::Tensor short_mask = segment_causal_mask_from_is_init(packed_is_init(4, 512, 10, 30, 3));
  const double allowed = short_mask.sum().item<double>() / static_cast<double>(short_mask.numel());
  const double short_fraction = WindowAttention::plan(short_mask, 32)->scored_fraction();
  EXPECT_LT(short_fraction, 0.15);
  EXPECT_GE(short_fraction, allowed);
  // One episode per row: the causal half and the tiles' diagonal, plus rounding.
  at::Tensor one = torch::zeros({2, 512}, torch::kBool);
  one.select(1, 0).fill_(true);
  const double one_fraction =
      WindowAttention::plan(segment_causal_mask_from_is_init(one), 32)->scored_fraction();
  EXPECT_GT(one_fraction, 0.5);
  EXPECT_LT(one_fraction, 0.62);
  // A sliding window of 32: the band and a tile.
  const double band = WindowAttention::plan(segment_causal_mask_from_is_init(one, 32), 32)->scored_fraction();
  EXPECT_LT(band, 64.0 / 512.0 + 1e-9);
}

TEST(WindowAttention, RoundedSpansHoldTheKeysInFewGroups) {
  for (int64_t needed = 1; needed <= 1000; ++needed) {
    const int64_t span = WindowAttention::rounded_span(needed, 16, 1000);
    EXPECT_GE(span, needed);
    EXPECT_LE(span, 1000);
    EXPECT_EQ(span % 16 == 0 || span == 1000, true) << needed;
    if (needed > 64) EXPECT_LE(span, needed * 5 / 4 + 16) << needed;
  }
  std::set<int64_t> spans;
  for (int64_t needed = 1; needed <= 1000; ++needed)
    spans.insert(WindowAttention::rounded_span(needed, 16, 1000));
  EXPECT_LE(spans.size(), 20u);
}

TEST(WindowAttention, LeavesAWindowWithAQueryThatSeesNothingToTheWholeCall) {
  at::Tensor mask = torch::ones({1, 8, 8}, torch::kBool).tril();
  mask[0][5].fill_(false);
  EXPECT_FALSE(WindowAttention::plan(mask, 4).has_value());
}

TEST(WindowAttention, RefusesAMaskThatIsNotBoolBTTAndANonPositiveTile) {
  EXPECT_THROW(WindowAttention::plan(torch::ones({1, 4, 4}), 2), InvalidArgumentError);
  EXPECT_THROW(WindowAttention::plan(torch::ones({4, 4}, torch::kBool), 2), InvalidArgumentError);
  EXPECT_THROW(WindowAttention::plan(torch::ones({1, 4, 3}, torch::kBool), 2), InvalidArgumentError);
  EXPECT_THROW(WindowAttention::plan(torch::ones({1, 4, 4}, torch::kBool), 0), InvalidArgumentError);
}

TEST(WindowAttention, BlockWithTilesMatchesTheWholeWindowBlockForwardAndBackward) {
  torch::manual_seed(3);
  TransformerBlock block(16, 4, 32, 0.0);
  const at::Tensor mask = segment_causal_mask_from_is_init(packed_is_init(3, 100, 2, 40, 4));
  const at::Tensor input = torch::randn({3, 100, 16});
  const std::optional<WindowAttention> tiled = WindowAttention::plan(mask, 16);
  auto run = [&](const WindowAttention* attention) {
    block->zero_grad();
    at::Tensor h = input.clone().requires_grad_(true);
    at::Tensor out = block->forward(h, mask.unsqueeze(-3), attention);
    (out * out).sum().backward();
    return std::make_tuple(out.detach(), h.grad(), block->named_parameters()["qkv.weight"].grad().clone());
  };
  const auto [whole, whole_input_grad, whole_grad] = run(nullptr);
  const auto [by_tiles, tiles_input_grad, tiles_grad] = run(&*tiled);
  EXPECT_TRUE(torch::allclose(by_tiles, whole, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(tiles_input_grad, whole_input_grad, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(tiles_grad, whole_grad, 1e-5, 1e-5));
}

// Two layers over windows of 300; a sliding window (rotary positions) when window > 0.
CausalTransformerOptions small_transformer(int64_t window) {
  CausalTransformerOptions options;
  options.input_size = 5;
  options.hidden_size = 32;
  options.num_layers = 2;
  options.num_heads = 4;
  options.max_seq_len = 300;
  options.attention_window = window;
  options.positions = window > 0 ? PositionEncoding::kRotary : PositionEncoding::kLearned;
  return options;
}

TEST(WindowAttention, TransformerWithTilesMatchesTheWholeWindowTransformer) {
  for (const int64_t window : {0, 40}) {
    CausalTransformerOptions options = small_transformer(window);
    torch::manual_seed(8);
    CausalTransformer tiled(options);
    options.tiled_attention = false;
    CausalTransformer whole(options);
    torch::NoGradGuard no_grad;
    for (const auto& item : whole.named_parameters())
      item.value().copy_(tiled.named_parameters()[item.key()]);
    const at::Tensor is_init = packed_is_init(3, 300, 5, 150, 6);
    const at::Tensor features = torch::randn({3, 300, 5});
    auto run = [&](CausalTransformer& model) {
      torch::AutoGradMode grad(true);
      model.zero_grad();
      const at::Tensor out = model
                                 .forward(features, positions_from_is_init(is_init),
                                          segment_causal_mask_from_is_init(is_init, window), nullptr)
                                 .out;
      out.pow(2).sum().backward();
      return std::make_pair(out.detach(), model.named_parameters()["blocks.0.qkv.weight"].grad().clone());
    };
    const auto [tiled_out, tiled_grad] = run(tiled);
    const auto [whole_out, whole_grad] = run(whole);
    EXPECT_TRUE(torch::allclose(tiled_out, whole_out, 1e-5, 1e-5)) << "window " << window;
    EXPECT_TRUE(torch::allclose(tiled_grad, whole_grad, 1e-5, 1e-5)) << "window " << window;
  }
}

TEST(WindowAttention, OneContextPerRowTakesTheCausalKernelAndMatchesTheMaskedWindow) {
  TransformerModuleOptions options;
  options.input_size = 3;
  options.hidden_size = 16;
  options.num_layers = 2;
  options.num_heads = 2;
  options.max_seq_len = 128;
  torch::manual_seed(2);
  TransformerModule fast(options);
  options.tiled_attention = false;
  TransformerModule whole(options);
  torch::NoGradGuard no_grad;
  for (const auto& item : whole.named_parameters()) item.value().copy_(fast.named_parameters()[item.key()]);
  const at::Tensor obs = torch::randn({3, 100, 3});
  at::Tensor is_init = torch::zeros({3, 100}, torch::kBool);
  is_init.select(1, 0).fill_(true);
  auto run = [&](TransformerModule& module) {
    torch::AutoGradMode grad(true);
    module.zero_grad();
    const at::Tensor out = module.window(obs, is_init);
    out.pow(2).sum().backward();
    return std::make_pair(out.detach(),
                          module.named_parameters()["transformer.blocks.1.qkv.weight"].grad().clone());
  };
  const auto [fast_out, fast_grad] = run(fast);
  const auto [whole_out, whole_grad] = run(whole);
  EXPECT_TRUE(torch::allclose(fast_out, whole_out, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(fast_grad, whole_grad, 1e-5, 1e-5));
  // A second context in one row: the masked (tiled) path, still equal.
  is_init[1][60] = true;
  const auto [fast_two, fast_two_grad] = run(fast);
  const auto [whole_two, whole_two_grad] = run(whole);
  EXPECT_TRUE(torch::allclose(fast_two, whole_two, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(fast_two_grad, whole_two_grad, 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(fast_two, fast_out, 1e-3, 1e-3));
}

AttentionResult attend_by_contexts(const at::Tensor& is_init, uint64_t seed) {
  torch::manual_seed(seed);
  const int64_t b = is_init.size(0);
  const int64_t t = is_init.size(1);
  at::Tensor q = torch::randn({b, 4, t, 16}).requires_grad_(true);
  at::Tensor k = torch::randn({b, 4, t, 16}).requires_grad_(true);
  at::Tensor v = torch::randn({b, 4, t, 16}).requires_grad_(true);
  const at::Tensor out = SegmentAttention(is_init)(q, k, v);
  (out * torch::linspace(-1, 1, t).view({1, 1, t, 1})).pow(2).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

TEST(SegmentAttention, EqualsTheWholeWindowContextByContext) {
  at::Tensor is_init = packed_is_init(4, 203, 1, 40, 9);
  is_init[1].zero_();     // one context over the whole row
  is_init[2][0] = false;  // column 0 starts a context whatever is_init says, as the mask does
  const AttentionResult whole = attend(segment_causal_mask_from_is_init(is_init), std::nullopt, 13);
  const AttentionResult contexts = attend_by_contexts(is_init, 13);
  EXPECT_TRUE(torch::allclose(contexts.output, whole.output, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(contexts.query_grad, whole.query_grad, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(contexts.key_grad, whole.key_grad, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(contexts.value_grad, whole.value_grad, 1e-5, 1e-5));
}

TEST(SegmentAttention, ScoresTheContextsTrianglesAndKnowsWholeRows) {
  const at::Tensor short_init = packed_is_init(4, 512, 10, 30, 3);
  const SegmentAttention short_contexts(short_init);
  EXPECT_FALSE(short_contexts.one_context_per_row());
  EXPECT_LT(short_contexts.scored_fraction(), 0.05);
  at::Tensor one = torch::zeros({3, 64}, torch::kBool);
  one.select(1, 0).fill_(true);
  EXPECT_TRUE(SegmentAttention(one).one_context_per_row());
  one[2][63] = true;
  EXPECT_FALSE(SegmentAttention(one).one_context_per_row());
  EXPECT_THROW(SegmentAttention(torch::ones({2, 4})), InvalidArgumentError);
  EXPECT_THROW(SegmentAttention(torch::ones({4}, torch::kBool)), InvalidArgumentError);
  EXPECT_THROW(SegmentAttention(torch::ones({2, 0}, torch::kBool)), InvalidArgumentError);
}

TEST(SegmentAttention, PackedWindowsOfTheTransformerMatchTheMaskedWindow) {
  for (const int64_t window : {0, 40}) {
    const CausalTransformerOptions options = small_transformer(window);
    torch::manual_seed(8);
    CausalTransformer packed(options);
    const at::Tensor is_init = packed_is_init(3, 300, 1, 150, 10);
    const at::Tensor features = torch::randn({3, 300, 5});
    const at::Tensor positions = positions_from_is_init(is_init);
    auto run = [&](bool by_contexts) {
      torch::AutoGradMode grad(true);
      packed.zero_grad();
      const at::Tensor out =
          by_contexts
              ? packed.forward_packed(features, positions, is_init).out
              : packed
                    .forward(features, positions, segment_causal_mask_from_is_init(is_init, window), nullptr)
                    .out;
      out.pow(2).sum().backward();
      return std::make_pair(out.detach(), packed.named_parameters()["blocks.0.qkv.weight"].grad().clone());
    };
    const auto [packed_out, packed_grad] = run(true);
    const auto [masked_out, masked_grad] = run(false);
    EXPECT_TRUE(torch::allclose(packed_out, masked_out, 1e-5, 1e-5)) << "window " << window;
    EXPECT_TRUE(torch::allclose(packed_grad, masked_grad, 1e-5, 1e-5)) << "window " << window;
  }
}

}  // namespace
}  // namespace kvrl
