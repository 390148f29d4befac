// Partial-batch stepping (TransformerModule::step_streams): streams stepped in any
// grouping and order give what stepping the whole batch in lockstep gives, to 1e-6, also
// across context restarts and weight updates.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <ostream>
#include <random>
#include <vector>

#include "common/model/transformer_module.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

constexpr int64_t kStreams = 5;
constexpr int64_t kSteps = 10;
constexpr int64_t kFeatures = 3;
constexpr double kTolerance = 1e-6;

TransformerModuleOptions learned_positions() {
  TransformerModuleOptions options;
  options.input_size = kFeatures;
  options.hidden_size = 16;
  options.num_layers = 2;
  options.num_heads = 4;
  options.max_seq_len = 12;
  return options;
}

TransformerModuleOptions sliding_window() {
  TransformerModuleOptions options = learned_positions();
  options.positions = PositionEncoding::kRotary;
  options.attention_window = 3;
  options.max_seq_len = 4;
  return options;
}

enum class Update { kNone, kRestart, kPrefill, kKeep };

// Inputs of every stream: value [streams, T, F] and is_init [streams, T] with resets.
struct Streams {
  at::Tensor value;
  at::Tensor is_init;
};

Streams random_streams() {
  Streams s{torch::randn({kStreams, kSteps, kFeatures}), torch::rand({kStreams, kSteps}) < 0.2};
  s.is_init.select(1, 0).fill_(true);
  return s;
}

void perturb_weights(TransformerModule& module, uint64_t seed) {
  torch::NoGradGuard no_grad;
  const auto generator = at::detail::createCPUGenerator(seed);
  for (auto& p : module.parameters()) p.add_(0.05 * at::randn(p.sizes(), generator, p.options()));
}

// What each stream's context holds at step `t`: the steps since its last is_init.
at::Tensor context_lengths(const Streams& s, int64_t t) {
  std::vector<int64_t> lengths(kStreams);
  for (int64_t i = 0; i < kStreams; ++i) {
    int64_t start = t - 1;
    while (start > 0 && !s.is_init[i][start].item<bool>()) --start;
    lengths[i] = t == 0 ? 0 : t - start;
  }
  return torch::tensor(lengths, torch::kLong);
}

// The context to prefill with: each stream's last `lengths[i]` steps before `t`, left-aligned.
at::Tensor context_values(const Streams& s, int64_t t, const at::Tensor& lengths) {
  at::Tensor context = torch::zeros({kStreams, t, kFeatures});
  for (int64_t i = 0; i < kStreams; ++i) {
    const int64_t length = lengths[i].item<int64_t>();
    context[i].narrow(0, 0, length).copy_(s.value[i].narrow(0, t - length, length));
  }
  return context;
}

void apply_update(TransformerModule& module, Update update, const Streams& s, int64_t t) {
  if (update == Update::kNone) return;
  perturb_weights(module, 7);
  switch (update) {
    case Update::kRestart:
      module.mark_weight_update();
      break;
    case Update::kKeep:
      module.keep_cache_across_weight_update();
      break;
    case Update::kPrefill: {
      const at::Tensor lengths = context_lengths(s, t);
      module.mark_weight_update();
      module.prefill(context_values(s, t, lengths), lengths);
      break;
    }
    case Update::kNone:
      break;
  }
}

// A restart policy restarts every context: the first step after it is a context start.
at::Tensor init_at(const Streams& s, int64_t t, Update update, int64_t update_at) {
  at::Tensor init = s.is_init.select(1, t).clone();
  if (update == Update::kRestart && t == update_at) init.fill_(true);
  return init;
}

// The whole batch in lockstep, the weights updated before step `update_at`: [streams, T, hidden].
at::Tensor lockstep(TransformerModule& module, const Streams& s, Update update, int64_t update_at) {
  std::vector<at::Tensor> outs;
  for (int64_t t = 0; t < kSteps; ++t) {
    if (t == update_at) apply_update(module, update, s, t);
    outs.push_back(module.step(s.value.select(1, t), init_at(s, t, update, update_at)));
  }
  return torch::stack(outs, 1);
}

// Groups of streams that each have a step left before `until`, each stream at its own pace:
// a random nonempty subset in a random order per call.
std::vector<int64_t> random_group(std::mt19937& rng, const std::vector<int64_t>& next_step, int64_t until) {
  std::vector<int64_t> ready;
  for (int64_t i = 0; i < kStreams; ++i) {
    if (next_step[i] < until) ready.push_back(i);
  }
  std::shuffle(ready.begin(), ready.end(), rng);
  const auto size = std::uniform_int_distribution<size_t>(1, ready.size())(rng);
  ready.resize(size);
  return ready;
}

// Steps the streams in random groups until each reached `until`; writes outputs into `out`.
void step_in_groups(TransformerModule& module, const Streams& s, std::vector<int64_t>& next_step,
                    int64_t until, Update update, int64_t update_at, std::mt19937& rng, at::Tensor& out) {
  auto remaining = [&] {
    return std::any_of(next_step.begin(), next_step.end(), [&](int64_t t) { return t < until; });
  };
  while (remaining()) {
    const std::vector<int64_t> group = random_group(rng, next_step, until);
    std::vector<at::Tensor> values, inits;
    for (int64_t i : group) {
      values.push_back(s.value[i][next_step[i]]);
      inits.push_back(init_at(s, next_step[i], update, update_at)[i]);
    }
    const at::Tensor stepped =
        module.step_streams(torch::stack(values), torch::stack(inits), torch::tensor(group, torch::kLong));
    for (size_t k = 0; k < group.size(); ++k) out[group[k]][next_step[group[k]]++].copy_(stepped[k]);
  }
}

// The same steps with each stream at its own pace, the update applied once all streams
// reached `update_at` (as a weight update lands between steps).
at::Tensor in_groups(TransformerModule& module, const Streams& s, Update update, int64_t update_at,
                     uint32_t seed) {
  std::mt19937 rng(seed);
  at::Tensor out = torch::zeros({kStreams, kSteps, 16});
  std::vector<int64_t> next_step(kStreams, 0);
  step_in_groups(module, s, next_step, update_at, update, update_at, rng, out);
  apply_update(module, update, s, update_at);
  step_in_groups(module, s, next_step, kSteps, update, update_at, rng, out);
  return out;
}

struct Case {
  const char* name;
  TransformerModuleOptions options;
  Update update;
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

class StreamStepsTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { torch::manual_seed(0); }
};

TEST_P(StreamStepsTest, AnyGroupingEqualsSteppingTheWholeBatch) {
  const Case& c = GetParam();
  const Streams s = random_streams();
  TransformerModule batch_module(c.options);
  // Taken before the lockstep run updates batch_module's weights.
  const auto original = std::dynamic_pointer_cast<TransformerModule>(batch_module.clone());
  const int64_t update_at = c.update == Update::kNone ? kSteps : 6;
  const at::Tensor expected = lockstep(batch_module, s, c.update, update_at);
  for (uint32_t seed : {1u, 2u, 3u}) {
    const auto grouped_module = std::dynamic_pointer_cast<TransformerModule>(original->clone());
    const at::Tensor grouped = in_groups(*grouped_module, s, c.update, update_at, seed);
    EXPECT_TRUE(torch::allclose(grouped, expected, 0, kTolerance))
        << c.name << " seed " << seed << ": max difference "
        << (grouped - expected).abs().max().item<double>();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Policies, StreamStepsTest,
    ::testing::Values(Case{"learned positions, resets", learned_positions(), Update::kNone},
                      Case{"sliding window, resets", sliding_window(), Update::kNone},
                      Case{"weight update, restart", learned_positions(), Update::kRestart},
                      Case{"weight update, prefill", learned_positions(), Update::kPrefill},
                      Case{"weight update, keep the cache", learned_positions(), Update::kKeep},
                      Case{"sliding window, weight update, prefill", sliding_window(), Update::kPrefill}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::to_string(info.index); });

TEST(StreamSteps, TheCacheGrowsForANewStreamAndKeepsTheOthers) {
  torch::manual_seed(0);
  TransformerModule module(learned_positions());
  auto reference = std::dynamic_pointer_cast<TransformerModule>(module.clone());
  const at::Tensor value = torch::randn({2, kFeatures});
  auto step_one = [&](int64_t stream, int64_t t, bool init) {
    return module.step_streams(value[t].unsqueeze(0), torch::full({1}, init, torch::kBool),
                               torch::tensor({stream}, torch::kLong));
  };
  step_one(0, 0, true);
  EXPECT_EQ(module.stream_positions().size(0), 1);
  step_one(2, 0, true);  // the cache grows to three streams
  EXPECT_TRUE(torch::equal(module.stream_positions(), torch::tensor({1, 0, 1}, torch::kLong)));
  // Stream 0's context survived the growth: its next step still attends to its first.
  const at::Tensor after_growth = step_one(0, 1, false);
  reference->step(value[0].unsqueeze(0), torch::ones({1}, torch::kBool));
  const at::Tensor expected = reference->step(value[1].unsqueeze(0), torch::zeros({1}, torch::kBool));
  EXPECT_TRUE(torch::allclose(after_growth, expected, 0, kTolerance));
}

TEST(StreamSteps, AWholeBatchStepContinuesTheKeyedStreams) {
  torch::manual_seed(0);
  TransformerModule module(learned_positions());
  auto reference = std::dynamic_pointer_cast<TransformerModule>(module.clone());
  const at::Tensor value = torch::randn({2, 2, kFeatures});
  const at::Tensor starts = torch::ones({1}, torch::kBool);
  module.step_streams(value[1][0].unsqueeze(0), starts, torch::tensor({1}, torch::kLong));
  module.step_streams(value[0][0].unsqueeze(0), starts, torch::tensor({0}, torch::kLong));
  const at::Tensor next = module.step(value.select(1, 1), torch::zeros({2}, torch::kBool));
  reference->step(value.select(1, 0), torch::ones({2}, torch::kBool));
  const at::Tensor expected = reference->step(value.select(1, 1), torch::zeros({2}, torch::kBool));
  EXPECT_TRUE(torch::allclose(next, expected, 0, kTolerance));
}

void expect_refusal(TransformerModule& module, const at::Tensor& value, const at::Tensor& ids,
                    const std::string& message) {
  try {
    module.step_streams(value, torch::zeros({value.size(0)}, torch::kBool), ids);
    FAIL() << "expected InvalidArgumentError: " << message;
  } catch (const InvalidArgumentError& error) {
    EXPECT_EQ(error.what(), message);
  }
}

TEST(StreamSteps, BadStreamIdsAreRefusedNamingThem) {
  TransformerModule module(learned_positions());
  const at::Tensor two = torch::randn({2, kFeatures});
  expect_refusal(
      module, two, torch::tensor({3, 3}, torch::kLong),
      "TransformerModule.step_streams: stream id 3 appears twice; each stream steps at most once per "
      "call.");
  expect_refusal(module, two, torch::tensor({0, -2}, torch::kLong),
                 "TransformerModule.step_streams: stream ids must be non-negative, got -2.");
  expect_refusal(
      module, two, torch::tensor({0, 1}, torch::kInt),
      "TransformerModule.step_streams: stream_ids must be a long tensor of shape [2], got Int[2].");
  expect_refusal(
      module, two, torch::tensor({0}, torch::kLong),
      "TransformerModule.step_streams: stream_ids must be a long tensor of shape [2], got Long[1].");
  expect_refusal(module, torch::randn({0, kFeatures}), torch::zeros({0}, torch::kLong),
                 "TransformerModule.step_streams: no stream to step.");
  EXPECT_FALSE(module.has_cache());  // nothing was stepped
}

TEST(StreamSteps, AStreamPastMaxSeqLenRaises) {
  TransformerModule module(learned_positions());
  const at::Tensor one = torch::randn({1, kFeatures});
  const at::Tensor id = torch::tensor({4}, torch::kLong);
  module.step_streams(one, torch::ones({1}, torch::kBool), id);
  for (int64_t t = 1; t < 12; ++t) module.step_streams(one, torch::zeros({1}, torch::kBool), id);
  EXPECT_THROW(module.step_streams(one, torch::zeros({1}, torch::kBool), id), SequenceTooLongError);
  // Another stream is not held back by it.
  EXPECT_NO_THROW(
      module.step_streams(one, torch::zeros({1}, torch::kBool), torch::tensor({0}, torch::kLong)));
}

}  // namespace
}  // namespace kvrl
