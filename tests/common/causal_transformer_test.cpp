#include "common/model/causal_transformer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "common/model/episode_masks.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

CausalTransformerOptions small_options() {
  CausalTransformerOptions options;
  options.input_size = 3;
  options.hidden_size = 16;
  options.num_layers = 2;
  options.num_heads = 4;
  options.max_seq_len = 10;
  return options;
}

class CausalTransformerTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_F(CausalTransformerTest, RejectsHiddenSizeNotDivisibleByHeads) {
  CausalTransformerOptions options = small_options();
  options.hidden_size = 18;
  try {
    CausalTransformer net(options);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "hidden_size (18) must be divisible by num_heads (4).");
  }
}

TEST_F(CausalTransformerTest, RejectsNonPositiveSizesNamingTheField) {
  for (auto edit : {+[](CausalTransformerOptions& o) { o.num_layers = 0; },
                    +[](CausalTransformerOptions& o) { o.max_seq_len = -1; },
                    +[](CausalTransformerOptions& o) { o.dim_feedforward = 0; },
                    +[](CausalTransformerOptions& o) { o.dropout = 1.5; }}) {
    CausalTransformerOptions options = small_options();
    edit(options);
    EXPECT_THROW(CausalTransformer{options}, InvalidArgumentError);
  }
}

TEST_F(CausalTransformerTest, ParameterNamesMatchTheReference) {
  CausalTransformer net(small_options());
  std::set<std::string> names;
  for (const auto& item : net.named_parameters()) names.insert(item.key());
  std::set<std::string> expected{"in_proj.weight", "in_proj.bias", "pos_emb.weight", "norm.weight",
                                 "norm.bias"};
  for (const char* block : {"blocks.0.", "blocks.1."}) {
    for (const char* name :
         {"norm1.weight", "norm1.bias", "qkv.weight", "out_proj.weight", "out_proj.bias", "norm2.weight",
          "norm2.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight", "mlp.2.bias"}) {
      expected.insert(std::string(block) + name);
    }
  }
  EXPECT_EQ(names, expected);
  EXPECT_EQ(net.named_parameters()["blocks.0.mlp.0.weight"].sizes(), (std::vector<int64_t>{64, 16}));
}

TEST_F(CausalTransformerTest, CacheHasReferenceLayoutInTheWeightsDtype) {
  CausalTransformer net(small_options());
  auto cache = std::dynamic_pointer_cast<CausalTransformerKvCache>(net.new_kv_cache(5, {}, {}));
  ASSERT_TRUE(cache);
  EXPECT_EQ(cache->keys.sizes(), (std::vector<int64_t>{5, 2, 4, 10, 4}));
  EXPECT_EQ(cache->keys.scalar_type(), torch::kFloat);
  EXPECT_EQ(cache->values.sizes(), cache->keys.sizes());
  net.to(torch::kDouble);
  auto as_double = std::dynamic_pointer_cast<CausalTransformerKvCache>(net.new_kv_cache(1, {}, {}));
  EXPECT_EQ(as_double->keys.scalar_type(), torch::kDouble);
  auto as_bf16 =
      std::dynamic_pointer_cast<CausalTransformerKvCache>(net.new_kv_cache(1, {}, torch::kBFloat16));
  EXPECT_EQ(as_bf16->values.scalar_type(), torch::kBFloat16);
}

TEST_F(CausalTransformerTest, CachedStepsMatchTheWindow) {
  CausalTransformer net(small_options());
  const at::Tensor features = torch::randn({2, 5, 3});
  const at::Tensor positions = torch::arange(5).expand({2, 5});
  const at::Tensor window = net.forward(features, positions, std::nullopt, nullptr).out;
  auto cache = net.new_kv_cache(2, {}, {});
  for (int64_t t = 0; t < 5; ++t) {
    auto step = net.forward(features.narrow(1, t, 1), positions.narrow(1, t, 1), std::nullopt, cache);
    EXPECT_TRUE(torch::allclose(step.out, window.narrow(1, t, 1), /*rtol=*/1e-5, /*atol=*/1e-6)) << t;
    cache = step.kv_cache;
  }
}

TEST_F(CausalTransformerTest, CachedStepRejectsMoreThanOneStep) {
  CausalTransformer net(small_options());
  try {
    net.forward(torch::randn({2, 2, 3}), torch::zeros({2, 2}, torch::kLong), std::nullopt,
                net.new_kv_cache(2, {}, {}));
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("expects a single step (T==1), got T=2"), std::string::npos);
  }
}

TEST_F(CausalTransformerTest, PositionsAtMaxSeqLenRaiseOnBothPaths) {
  CausalTransformer net(small_options());
  const at::Tensor at_limit = torch::full({1, 1}, 10, torch::kLong);
  EXPECT_THROW(net.forward(torch::randn({1, 1, 3}), at_limit, std::nullopt, nullptr), SequenceTooLongError);
  EXPECT_THROW(net.forward(torch::randn({1, 1, 3}), at_limit, std::nullopt, net.new_kv_cache(1, {}, {})),
               SequenceTooLongError);
  EXPECT_NO_THROW(net.forward(torch::randn({1, 1, 3}), at_limit - 1, std::nullopt, nullptr));
}

TEST_F(CausalTransformerTest, CachedEntriesAreDetached) {
  CausalTransformer net(small_options());
  auto cache = net.new_kv_cache(2, {}, {});
  const at::Tensor features = torch::randn({2, 1, 3}, torch::requires_grad());
  auto step = net.forward(features, torch::zeros({2, 1}, torch::kLong), std::nullopt, cache);
  EXPECT_TRUE(step.out.requires_grad());
  auto* typed = dynamic_cast<CausalTransformerKvCache*>(step.kv_cache.get());
  EXPECT_FALSE(typed->keys.requires_grad());
  EXPECT_FALSE(typed->values.requires_grad());
  EXPECT_NE(typed->keys.abs().sum().item<float>(), 0.0f);
}

TEST_F(CausalTransformerTest, ResetZeroesOnlySelectedStreams) {
  CausalTransformer net(small_options());
  auto cache = net.new_kv_cache(3, {}, {});
  cache =
      net.forward(torch::randn({3, 1, 3}), torch::zeros({3, 1}, torch::kLong), std::nullopt, cache).kv_cache;
  cache = net.reset_kv_cache(cache, torch::tensor({false, true, false}));
  auto* typed = dynamic_cast<CausalTransformerKvCache*>(cache.get());
  EXPECT_EQ(typed->keys[1].abs().sum().item<float>(), 0.0f);
  EXPECT_EQ(typed->values[1].abs().sum().item<float>(), 0.0f);
  EXPECT_NE(typed->keys[0].abs().sum().item<float>(), 0.0f);
  EXPECT_NE(typed->values[2].abs().sum().item<float>(), 0.0f);
  EXPECT_THROW(net.reset_kv_cache(cache, torch::tensor({true, false})), InvalidArgumentError);
}

// The step attends over the slots in use only: what lies past the largest position
// cannot reach the output (the reference would multiply it by a zero weight).
TEST_F(CausalTransformerTest, CachedStepNeverReadsSlotsPastTheContextInUse) {
  CausalTransformer net(small_options());
  const at::Tensor features = torch::randn({2, 3, 3});
  auto run = [&](bool poison) {
    auto cache = net.new_kv_cache(2, {}, {});
    auto* typed = dynamic_cast<CausalTransformerKvCache*>(cache.get());
    if (poison) {
      typed->keys.narrow(3, 3, 7).fill_(std::numeric_limits<float>::quiet_NaN());
      typed->values.narrow(3, 3, 7).fill_(std::numeric_limits<float>::quiet_NaN());
    }
    at::Tensor last;
    for (int64_t t = 0; t < 3; ++t) {
      auto step =
          net.forward(features.narrow(1, t, 1), torch::full({2, 1}, t, torch::kLong), std::nullopt, cache);
      cache = step.kv_cache;
      last = step.out;
    }
    return last;
  };
  const at::Tensor clean = run(false);
  const at::Tensor poisoned = run(true);
  EXPECT_TRUE(torch::isfinite(poisoned).all().item<bool>());
  EXPECT_TRUE(torch::equal(clean, poisoned));
}

TEST_F(CausalTransformerTest, CloneCopiesValuesIntoIndependentStorage) {
  CausalTransformer net(small_options());
  net.to(torch::kDouble);
  auto copy = std::dynamic_pointer_cast<CausalTransformer>(net.clone());
  ASSERT_TRUE(copy);
  auto source = net.named_parameters();
  for (const auto& item : copy->named_parameters()) {
    EXPECT_TRUE(torch::equal(item.value(), source[item.key()])) << item.key();
    EXPECT_NE(item.value().data_ptr(), source[item.key()].data_ptr()) << item.key();
    EXPECT_EQ(item.value().scalar_type(), torch::kDouble);
  }
}

}  // namespace
}  // namespace kvrl
