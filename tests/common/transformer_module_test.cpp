#include "common/model/transformer_module.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/model/autocast_scope.h"
#include "common/model/causal_transformer.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

TransformerModuleOptions small_options() {
  TransformerModuleOptions options;
  options.input_size = 3;
  options.hidden_size = 16;
  options.num_layers = 2;
  options.num_heads = 4;
  options.max_seq_len = 12;
  return options;
}

class TransformerModuleTest : public ::testing::Test {
 protected:
  void SetUp() override { torch::manual_seed(0); }

  // Steps `module` through value [*batch, T, F] along T and stacks the outputs.
  static at::Tensor step_through(TransformerModule& module, const at::Tensor& value,
                                 const at::Tensor& is_init) {
    const int64_t time_dim = value.dim() - 2;
    std::vector<at::Tensor> outs;
    for (int64_t t = 0; t < value.size(time_dim); ++t) {
      outs.push_back(module.step(value.select(time_dim, t), is_init.select(time_dim, t)));
    }
    return torch::stack(outs, time_dim);
  }

  // Random is_init [*batch, T] with every row starting an episode and resets elsewhere.
  static at::Tensor random_is_init(const std::vector<int64_t>& shape) {
    at::Tensor is_init = torch::rand(shape) < 0.25;
    is_init.select(-1, 0).fill_(true);
    return is_init;
  }
};

TEST_F(TransformerModuleTest, ConstructorRequiresSizes) {
  TransformerModuleOptions options = small_options();
  options.hidden_size.reset();
  try {
    TransformerModule module(options);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "input_size and hidden_size must be passed.");
  }
  options = small_options();
  options.max_seq_len.reset();
  try {
    TransformerModule module(options);
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "num_heads and max_seq_len must be passed.");
  }
  options = small_options();
  options.num_heads = 5;
  EXPECT_THROW(TransformerModule{options}, InvalidArgumentError);
}

TEST_F(TransformerModuleTest, BackboneCannotComeWithSizeArguments) {
  CausalTransformerOptions sizes;
  sizes.input_size = 3;
  sizes.hidden_size = 16;
  sizes.num_heads = 4;
  sizes.max_seq_len = 8;
  auto backbone = std::make_shared<CausalTransformer>(sizes);
  try {
    TransformerModule module(backbone, small_options());
    FAIL() << "expected InvalidArgumentError";
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "A transformer instance cannot be passed along with size arguments.");
  }
  EXPECT_THROW(TransformerModule(nullptr, TransformerModuleOptions{}), InvalidArgumentError);
  EXPECT_NO_THROW(TransformerModule(backbone, TransformerModuleOptions{}));
}

TEST_F(TransformerModuleTest, StepMatchesWindowForSeveralBatchShapesWithResets) {
  TransformerModule module(small_options());
  for (const std::vector<int64_t>& batch : {std::vector<int64_t>{}, {4}, {2, 3}}) {
    std::vector<int64_t> shape = batch;
    shape.push_back(9);
    const at::Tensor is_init = random_is_init(shape);
    shape.push_back(3);
    const at::Tensor value = torch::randn(shape);
    module.reset_cache();
    const at::Tensor steps = step_through(module, value, is_init);
    const at::Tensor window = module.window(value, is_init.unsqueeze(-1));
    ASSERT_EQ(window.sizes(), steps.sizes());
    EXPECT_TRUE(torch::allclose(steps, window, /*rtol=*/1e-5, /*atol=*/1e-5)) << c10::str(batch);
  }
}

TEST_F(TransformerModuleTest, WindowPathCarriesGradientsAndStepPathDoesNot) {
  TransformerModule module(small_options());
  const at::Tensor value = torch::randn({2, 4, 3});
  const at::Tensor is_init = random_is_init({2, 4});
  module.window(value, is_init).sum().backward();
  for (const auto& parameter : module.parameters()) EXPECT_TRUE(parameter.grad().defined());
  EXPECT_FALSE(module.step(value.select(1, 0), is_init.select(1, 0)).requires_grad());
}

TEST_F(TransformerModuleTest, Float64AndBfloat16ModulesKeepTheirDtypeInTheCache) {
  for (auto [dtype, tolerance] : {std::pair{torch::kDouble, 1e-10}, std::pair{torch::kBFloat16, 5e-2}}) {
    TransformerModule module(small_options());
    module.to(dtype);
    const at::Tensor value = torch::randn({3, 6, 3}).to(dtype);
    const at::Tensor is_init = random_is_init({3, 6});
    const at::Tensor steps = step_through(module, value, is_init);
    EXPECT_EQ(steps.scalar_type(), dtype);
    EXPECT_TRUE(torch::allclose(steps.to(torch::kDouble), module.window(value, is_init).to(torch::kDouble),
                                /*rtol=*/0, /*atol=*/tolerance))
        << c10::toString(dtype);
  }
}

TEST_F(TransformerModuleTest, AutocastCollectionCachesInTheAutocastDtype) {
  TransformerModule module(small_options());
  const at::Tensor value = torch::randn({2, 5, 3});
  const at::Tensor is_init = random_is_init({2, 5});
  at::Tensor steps;
  {
    AutocastScope autocast(c10::DeviceType::CPU, torch::kBFloat16);
    steps = step_through(module, value, is_init);
    // The module must have allocated its cache in bf16, not the float32 of the weights.
    auto& backbone = dynamic_cast<CausalTransformer&>(module.transformer());
    EXPECT_EQ(backbone.named_parameters()["in_proj.weight"].scalar_type(), torch::kFloat);
  }
  EXPECT_EQ(steps.scalar_type(), torch::kFloat);  // the final LayerNorm runs in float32
  const at::Tensor window = module.window(value, is_init);
  EXPECT_TRUE(torch::allclose(steps, window, /*rtol=*/0, /*atol=*/5e-2));
  EXPECT_FALSE(torch::allclose(steps, window, /*rtol=*/0, /*atol=*/1e-6))
      << "bf16 collection should differ from float32 at float32 precision";
  // Leaving autocast changes the cache dtype, so the next step restarts every stream.
  module.step(value.select(1, 0), torch::zeros({2}, torch::kBool));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::ones({2}, torch::kLong)));
}

TEST_F(TransformerModuleTest, ResetForgetsHistory) {
  TransformerModule module(small_options());
  const at::Tensor history = torch::randn({2, 4, 3});
  const at::Tensor episode = torch::randn({2, 3, 3});
  at::Tensor is_init = torch::zeros({2, 3}, torch::kBool);
  is_init.select(1, 0).fill_(true);
  step_through(module, history, torch::zeros({2, 4}, torch::kBool));
  const at::Tensor after_history = step_through(module, episode, is_init);
  module.reset_cache();
  const at::Tensor fresh = step_through(module, episode, is_init);
  EXPECT_TRUE(torch::allclose(after_history, fresh, 1e-6, 1e-6));
  // Without the reset flag the history is attended to and the outputs differ.
  step_through(module, history, torch::zeros({2, 4}, torch::kBool));
  const at::Tensor continued = step_through(module, episode, torch::zeros({2, 3}, torch::kBool));
  EXPECT_FALSE(torch::allclose(continued, fresh, 1e-3, 1e-3));
}

TEST_F(TransformerModuleTest, ResetOnlyRestartsFlaggedStreams) {
  TransformerModule module(small_options());
  step_through(module, torch::randn({3, 4, 3}), torch::zeros({3, 4}, torch::kBool));
  module.step(torch::randn({3, 3}), torch::tensor({false, true, false}));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::tensor({5, 1, 5}, torch::kLong)));
}

TEST_F(TransformerModuleTest, MisalignedWindowRaisesUnlessValidationIsOff) {
  TransformerModule module(small_options());
  const at::Tensor value = torch::randn({2, 4, 3});
  at::Tensor is_init = torch::zeros({2, 4}, torch::kBool);
  is_init[0][0] = true;
  EXPECT_THROW(module.window(value, is_init), InvalidArgumentError);
  TransformerModuleOptions unchecked = small_options();
  unchecked.validate_windows = false;
  TransformerModule lenient(unchecked);
  EXPECT_NO_THROW(lenient.window(value, is_init));
}

TEST_F(TransformerModuleTest, InPlaceWeightUpdateRestartsTheStreams) {
  TransformerModule module(small_options());
  step_through(module, torch::randn({2, 3, 3}), torch::zeros({2, 3}, torch::kBool));
  {
    torch::NoGradGuard no_grad;
    module.transformer().named_parameters()["in_proj.bias"].add_(0.1);
  }
  module.step(torch::randn({2, 3}), torch::zeros({2}, torch::kBool));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::ones({2}, torch::kLong)));
}

TEST_F(TransformerModuleTest, SwappedWeightTensorsRestartTheStreams) {
  TransformerModule module(small_options());
  step_through(module, torch::randn({2, 3, 3}), torch::zeros({2, 3}, torch::kBool));
  at::Tensor weight = module.transformer().named_parameters()["norm.weight"];
  weight.set_data(torch::ones_like(weight) * 2);
  const at::Tensor value = torch::randn({2, 3});
  const at::Tensor after_swap = module.step(value, torch::zeros({2}, torch::kBool));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::ones({2}, torch::kLong)));
  module.reset_cache();
  EXPECT_TRUE(torch::allclose(after_swap, module.step(value, torch::ones({2}, torch::kBool))));
}

TEST_F(TransformerModuleTest, MarkWeightUpdateDiscardsTheCache) {
  TransformerModule module(small_options());
  module.step(torch::randn({2, 3}), torch::ones({2}, torch::kBool));
  EXPECT_TRUE(module.has_cache());
  module.mark_weight_update();
  EXPECT_FALSE(module.has_cache());
  module.step(torch::randn({2, 3}), torch::zeros({2}, torch::kBool));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::ones({2}, torch::kLong)));
}

// After new weights, prefill() rebuilds each stream's context so the next steps equal the
// window path over the whole episode with the new weights, whatever each stream's length.
TEST_F(TransformerModuleTest, PrefillKeepsEveryStreamsContextAcrossAWeightUpdate) {
  TransformerModule module(small_options());
  const at::Tensor episodes = torch::randn({3, 9, 3});
  const at::Tensor lengths = torch::tensor({5, 0, 7}, torch::kLong);
  // Old weights act on the prefixes, then the weights change.
  for (int64_t t = 0; t < 7; ++t) module.step(episodes.select(1, t), torch::full({3}, t == 0, torch::kBool));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : module.parameters()) p.add_(0.05 * torch::randn_like(p));
  }
  module.mark_weight_update();
  module.prefill(episodes.narrow(1, 0, 7), lengths);
  EXPECT_TRUE(torch::equal(module.stream_positions(), lengths));
  // Continue each stream from its own length and compare with the window over the episode.
  const at::Tensor full = module.window(episodes, [] {
    at::Tensor init = torch::zeros({3, 9}, torch::kBool);
    init.select(1, 0).fill_(true);
    return init;
  }());
  const at::Tensor next_value = torch::stack({episodes[0][5], episodes[1][0], episodes[2][7]});
  const at::Tensor next = module.step(next_value, torch::tensor({false, true, false}));
  EXPECT_TRUE(torch::allclose(next[0], full[0][5], 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(next[1], full[1][0], 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(next[2], full[2][7], 1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::tensor({6, 1, 8}, torch::kLong)));
}

// Without prefill a weight update restarts the streams: the same step then differs from
// the full-context window, which is what prefill() exists to avoid.
TEST_F(TransformerModuleTest, WithoutPrefillAWeightUpdateLosesTheContext) {
  TransformerModule module(small_options());
  const at::Tensor episodes = torch::randn({2, 6, 3});
  for (int64_t t = 0; t < 5; ++t) module.step(episodes.select(1, t), torch::full({2}, t == 0, torch::kBool));
  module.mark_weight_update();
  const at::Tensor next = module.step(episodes.select(1, 5), torch::zeros({2}, torch::kBool));
  at::Tensor init = torch::zeros({2, 6}, torch::kBool);
  init.select(1, 0).fill_(true);
  const at::Tensor full = module.window(episodes, init);
  EXPECT_FALSE(torch::allclose(next, full.select(1, 5), 1e-3, 1e-3));
}

// CausalTransformer's one-window prefill writes the same cache as the generic replay.
TEST_F(TransformerModuleTest, WindowPrefillMatchesTheStepReplay) {
  TransformerModule module(small_options());
  auto& backbone = dynamic_cast<CausalTransformer&>(module.transformer());
  const at::Tensor features = torch::randn({4, 6, 3});
  auto windowed = backbone.new_kv_cache(4, std::nullopt, std::nullopt);
  auto replayed = backbone.new_kv_cache(4, std::nullopt, std::nullopt);
  const at::Tensor lengths = torch::full({4}, 6, torch::kLong);
  backbone.prefill_kv_cache(features, lengths, *windowed);
  backbone.Backbone::prefill_kv_cache(features, lengths, *replayed);
  const auto& a = dynamic_cast<CausalTransformerKvCache&>(*windowed);
  const auto& b = dynamic_cast<CausalTransformerKvCache&>(*replayed);
  EXPECT_GT(a.keys.abs().sum().item<double>(), 0.0);
  EXPECT_TRUE(torch::allclose(a.keys, b.keys, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(a.values, b.values, 1e-5, 1e-5));
  EXPECT_EQ(a.high_water, 6);
}

TEST_F(TransformerModuleTest, PrefillRejectsBadLengthsNamingThem) {
  TransformerModule module(small_options());
  const at::Tensor value = torch::randn({2, 4, 3});
  EXPECT_THROW(module.prefill(value, torch::tensor({1, 5}, torch::kLong)), InvalidArgumentError);
  EXPECT_THROW(module.prefill(value, torch::tensor({1, -1}, torch::kLong)), InvalidArgumentError);
  EXPECT_THROW(module.prefill(value, torch::tensor({1, 2, 3}, torch::kLong)), InvalidArgumentError);
  EXPECT_THROW(module.prefill(value, torch::tensor({1.0, 2.0})), InvalidArgumentError);
  try {
    module.prefill(value, torch::tensor({1, 5}, torch::kLong));
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("[0, T=4]"), std::string::npos) << error.what();
  }
  EXPECT_THROW(module.prefill(torch::randn({2, 13, 3}), torch::tensor({1, 2}, torch::kLong)),
               SequenceTooLongError);
}

TEST_F(TransformerModuleTest, ResetCacheAndBatchSizeChangeStartAfresh) {
  TransformerModule module(small_options());
  step_through(module, torch::randn({2, 3, 3}), torch::zeros({2, 3}, torch::kBool));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::full({2}, 3, torch::kLong)));
  module.reset_cache();
  EXPECT_FALSE(module.has_cache());
  EXPECT_FALSE(module.stream_positions().defined());
  step_through(module, torch::randn({2, 2, 3}), torch::zeros({2, 2}, torch::kBool));
  module.step(torch::randn({5, 3}), torch::zeros({5}, torch::kBool));
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::ones({5}, torch::kLong)));
}

TEST_F(TransformerModuleTest, ClonesStartWithAnEmptyCache) {
  TransformerModule module(small_options());
  const at::Tensor value = torch::randn({2, 3});
  module.step(value, torch::ones({2}, torch::kBool));
  auto copy = std::dynamic_pointer_cast<TransformerModule>(module.clone());
  ASSERT_TRUE(copy);
  EXPECT_FALSE(copy->has_cache());
  EXPECT_TRUE(module.has_cache());
  module.reset_cache();
  EXPECT_TRUE(torch::equal(copy->step(value, torch::ones({2}, torch::kBool)),
                           module.step(value, torch::ones({2}, torch::kBool))));
}

TEST_F(TransformerModuleTest, ExceedingMaxSeqLenRaisesOnBothPaths) {
  TransformerModule module(small_options());
  for (int64_t t = 0; t < 12; ++t) module.step(torch::randn({1, 3}), torch::tensor({t == 0}));
  EXPECT_THROW(module.step(torch::randn({1, 3}), torch::tensor({false})), SequenceTooLongError);
  at::Tensor is_init = torch::zeros({1, 13}, torch::kBool);
  is_init[0][0] = true;
  EXPECT_THROW(module.window(torch::randn({1, 13, 3}), is_init), SequenceTooLongError);
  is_init[0][6] = true;  // two episodes of 6 and 7 steps fit
  EXPECT_NO_THROW(module.window(torch::randn({1, 13, 3}), is_init));
}

TEST_F(TransformerModuleTest, RecurrentModeGuardSelectsThePathAndNests) {
  TransformerModule module(small_options());
  const at::Tensor value = torch::randn({2, 4, 3});
  const at::Tensor is_init = random_is_init({2, 4});
  EXPECT_FALSE(module.recurrent_mode());
  {
    RecurrentModeGuard window_mode(true);
    EXPECT_TRUE(module.recurrent_mode());
    EXPECT_EQ(module.forward(value, is_init).sizes(), (std::vector<int64_t>{2, 4, 16}));
    {
      RecurrentModeGuard step_mode(false);
      EXPECT_FALSE(module.recurrent_mode());
      // In step mode the time dim is a batch dim: 8 streams, one step each.
      EXPECT_EQ(module.forward(value, is_init).sizes(), (std::vector<int64_t>{2, 4, 16}));
      EXPECT_EQ(module.stream_positions().size(0), 8);
    }
    EXPECT_TRUE(module.recurrent_mode());
  }
  EXPECT_FALSE(module.recurrent_mode());
  TransformerModuleOptions options = small_options();
  options.default_recurrent_mode = true;
  EXPECT_TRUE(TransformerModule(options).recurrent_mode());
}

TEST_F(TransformerModuleTest, RejectsBadIsInit) {
  TransformerModule module(small_options());
  EXPECT_THROW(module.step(torch::randn({2, 3}), torch::ones({2})), InvalidArgumentError);
  EXPECT_THROW(module.step(torch::randn({2, 3}), torch::ones({3}, torch::kBool)), InvalidArgumentError);
  EXPECT_THROW(module.window(torch::randn({3}), torch::ones({1}, torch::kBool)), InvalidArgumentError);
}

// A backbone with its own cache type: wraps a CausalTransformer and counts what the
// module asks of it, to show the module treats the cache as opaque.
struct CountingCache : KvCache {
  std::shared_ptr<KvCache> inner;
};

class CountingBackbone : public Backbone {
 public:
  explicit CountingBackbone(std::shared_ptr<CausalTransformer> inner) : inner_(std::move(inner)) {
    register_module("inner", inner_);
  }
  BackboneOutput forward(const at::Tensor& features, const at::Tensor& positions,
                         const std::optional<at::Tensor>& mask, std::shared_ptr<KvCache> kv_cache) override {
    auto* cache = dynamic_cast<CountingCache*>(kv_cache.get());
    if (kv_cache && !cache) throw InvalidArgumentError("foreign cache");
    auto out = inner_->forward(features, positions, mask, cache ? cache->inner : nullptr);
    if (cache) cache->inner = out.kv_cache;
    return {out.out, kv_cache};
  }
  std::shared_ptr<KvCache> new_kv_cache(int64_t batch_size, std::optional<c10::Device> device,
                                        std::optional<c10::ScalarType> dtype) override {
    ++allocations;
    auto cache = std::make_shared<CountingCache>();
    cache->inner = inner_->new_kv_cache(batch_size, device, dtype);
    return cache;
  }
  std::shared_ptr<KvCache> reset_kv_cache(std::shared_ptr<KvCache> kv_cache,
                                          const at::Tensor& mask) override {
    resets_requested += mask.sum().item<int64_t>();
    auto* cache = dynamic_cast<CountingCache*>(kv_cache.get());
    cache->inner = inner_->reset_kv_cache(cache->inner, mask);
    return kv_cache;
  }
  int64_t num_layers() const override { return inner_->num_layers(); }
  int64_t num_heads() const override { return inner_->num_heads(); }
  int64_t head_dim() const override { return inner_->head_dim(); }
  int64_t max_seq_len() const override { return inner_->max_seq_len(); }

  int allocations = 0;
  int64_t resets_requested = 0;

 private:
  std::shared_ptr<CausalTransformer> inner_;
};

TEST_F(TransformerModuleTest, CustomBackbonePlugsIn) {
  TransformerModule reference(small_options());
  auto inner = std::dynamic_pointer_cast<CausalTransformer>(reference.transformer().clone());
  auto counting = std::make_shared<CountingBackbone>(inner);
  TransformerModule module(counting, TransformerModuleOptions{});
  const at::Tensor value = torch::randn({3, 5, 3});
  const at::Tensor is_init = random_is_init({3, 5});
  EXPECT_TRUE(torch::allclose(step_through(module, value, is_init), step_through(reference, value, is_init)));
  EXPECT_EQ(counting->allocations, 1);
  // The first step restarts all 3 streams; later ones reset where is_init is set.
  EXPECT_EQ(counting->resets_requested, 3 + is_init.narrow(1, 1, 4).sum().item<int64_t>());
  EXPECT_TRUE(torch::allclose(module.window(value, is_init), reference.window(value, is_init)));
}

TEST_F(TransformerModuleTest, BackboneContractAttributesMustBePositive) {
  class EmptyBackbone : public CountingBackbone {
   public:
    using CountingBackbone::CountingBackbone;
    int64_t num_heads() const override { return 0; }
  };
  CausalTransformerOptions sizes;
  sizes.input_size = 3;
  sizes.hidden_size = 16;
  sizes.num_heads = 4;
  sizes.max_seq_len = 8;
  auto backbone = std::make_shared<EmptyBackbone>(std::make_shared<CausalTransformer>(sizes));
  EXPECT_THROW(TransformerModule(backbone, TransformerModuleOptions{}), InvalidArgumentError);
}

}  // namespace
}  // namespace kvrl
