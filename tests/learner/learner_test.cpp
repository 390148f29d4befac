#include "learner/learner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/comm/local_communicator.h"
#include "common/support/errors.h"
#include "learner/policy_losses.h"
#include "learner/returns.h"
#include "learner/window_batch.h"
#include "tests/learner/learner_fixtures.h"

namespace kvrl {
namespace {

using fixtures::episode_of_length;
using fixtures::two_action_model;

TEST(WindowBatch, PacksEpisodesFirstFitAndStartsRowsAtEpisodeStarts) {
  const WindowBatch batch =
      pack_windows({episode_of_length(3), episode_of_length(9), episode_of_length(5)}, 16);
  EXPECT_EQ(batch.width(), 10);  // the longest episode plus its final token
  EXPECT_EQ(batch.rows(), 2);
  EXPECT_EQ(batch.row_tokens, (std::vector<int64_t>{10, 10}));  // 17 steps and 3 final tokens
  EXPECT_EQ(batch.row_steps, (std::vector<int64_t>{9, 8}));
  EXPECT_TRUE(batch.is_init.select(1, 0).all().item<bool>());
  EXPECT_EQ(batch.step_mask.sum().item<int64_t>(), 17);
  const EpisodeSlot& nine = batch.slots[1];
  EXPECT_EQ(nine.row, 0);
  EXPECT_EQ(nine.offset, 0);
  const EpisodeSlot& three = batch.slots[0];
  EXPECT_EQ(three.row, 1);
  EXPECT_EQ(three.offset, 6);  // after the 5-step episode and its final token
  // The final token continues its episode and holds the final observation.
  EXPECT_FALSE(batch.is_init[1][9].item<bool>());
  EXPECT_EQ(batch.observations[1][9][0].item<float>(), -1.0f);
  EXPECT_FALSE(batch.step_mask[1][9].item<bool>());
}

// Image episodes stay bytes in the batch: the same layout as floats, a quarter of the memory.
TEST(WindowBatch, Uint8ObservationsArePackedAsBytes) {
  std::vector<Episode> floats{episode_of_length(3), episode_of_length(9), episode_of_length(5)};
  std::vector<Episode> bytes = floats;
  for (Episode& e : bytes) {
    for (ObservationValues* values : {&e.observations, &e.final_observation}) {
      ObservationValues image(ObservationElement::kUInt8);
      for (float value : values->to_floats()) image.push_back(value < 0 ? 200.0f : value);
      *values = image;
    }
  }
  const WindowBatch from_floats = pack_windows(floats, 16);
  const WindowBatch from_bytes = pack_windows(bytes, 16);
  EXPECT_EQ(from_bytes.observations.scalar_type(), at::kByte);
  EXPECT_EQ(from_bytes.observations[1][9][0].item<int64_t>(), 200);  // a final observation
  EXPECT_TRUE(torch::equal(from_bytes.observations.to(at::kFloat),
                           from_floats.observations.clamp_min(0) + from_floats.observations.lt(0) * 200));
  std::vector<Episode> mixed{floats[0], bytes[1]};
  try {
    pack_windows(mixed, 16);
    FAIL();
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("different observation elements (float32 and uint8)"),
              std::string::npos);
  }
}

TEST(WindowBatch, RowsAreCutToTheWidestSelectedRow) {
  // Rows of 10, 8 and 6 tokens (9-, 7- and 5-step episodes).
  const WindowBatch batch =
      pack_windows({episode_of_length(9), episode_of_length(5), episode_of_length(7)}, 16);
  ASSERT_EQ(batch.row_tokens, (std::vector<int64_t>{10, 8, 6}));
  EXPECT_EQ(batch.row_steps, (std::vector<int64_t>{9, 7, 5}));
  const WindowRows rows(batch, torch::tensor({2, 1}, torch::kLong));
  EXPECT_EQ(rows.width(), 8);
  EXPECT_EQ(rows.steps(), 12);
  EXPECT_EQ(rows.computed_tokens(), 16);
  const at::Tensor observations = rows(batch.observations);
  EXPECT_EQ(observations.sizes(), (std::vector<int64_t>{2, 8, batch.observations.size(2)}));
  EXPECT_TRUE(torch::equal(observations[0], batch.observations[2].narrow(0, 0, 8)));
  EXPECT_TRUE(torch::equal(rows(batch.step_mask)[1], batch.step_mask[1].narrow(0, 0, 8)));
  // Nothing cut off was a step.
  EXPECT_EQ(rows(batch.step_mask).sum().item<int64_t>(), rows.steps());
  EXPECT_EQ(WindowRows(batch, torch::tensor({0}, torch::kLong)).width(), 10);
}

TEST(WindowBatch, AContextRestartInsideAnEpisodeStartsANewSegment) {
  Episode restarted = episode_of_length(6);
  restarted.is_init[4] = 1;  // the actor restarted its contexts here
  const WindowBatch batch = pack_windows({restarted}, 16);
  const std::vector<bool> expected = {true, false, false, false,
                                      true, false, false};  // 6 steps + final token
  for (int64_t t = 0; t < 7; ++t) EXPECT_EQ(batch.is_init[0][t].item<bool>(), expected[t]) << "token " << t;
}

TEST(WindowBatch, RejectsAnEpisodeLongerThanMaxSeqLen) {
  EXPECT_THROW(pack_windows({episode_of_length(8)}, 8), InvalidArgumentError);
  EXPECT_NO_THROW(pack_windows({episode_of_length(7)}, 8));
}

// A fragment of a long episode: steps [first_step, first_step + length) with `context`
// prefix observations before them; its episode goes on after it.
Episode fragment(int64_t length, int64_t first_step, int64_t context) {
  Episode e = episode_of_length(length);
  e.terminated.back() = 0;
  e.first_step = first_step;
  e.is_init[0] = context == 0;
  for (int64_t i = 0; i < context; ++i) e.context_observations.append({9.0f, 9.0f});
  return e;
}

TEST(WindowBatch, AFragmentsContextPrefixComesFirstAsBurnInWithNoLoss) {
  const WindowBatch batch = pack_windows({fragment(/*length=*/4, /*first_step=*/100, /*context=*/3)}, 16);
  ASSERT_EQ(batch.width(), 8);  // 3 prefix tokens, 4 steps, the final token
  const EpisodeSlot& slot = batch.slots.front();
  EXPECT_EQ(slot.offset, 3);
  EXPECT_EQ(slot.context, 3);
  const std::vector<bool> init = {true, false, false, false, false, false, false, false};
  const std::vector<bool> trained = {false, false, false, true, true, true, true, false};
  for (int64_t t = 0; t < 8; ++t) {
    EXPECT_EQ(batch.is_init[0][t].item<bool>(), init[t]) << "token " << t;
    EXPECT_EQ(batch.step_mask[0][t].item<bool>(), trained[t]) << "token " << t;
  }
  EXPECT_EQ(batch.observations[0][0][0].item<float>(), 9.0f);  // the prefix
  EXPECT_EQ(batch.observations[0][3][1].item<float>(), 0.0f);  // the fragment's first step
  EXPECT_EQ(batch.policy_versions[0][2].item<int64_t>(), -1);
  EXPECT_EQ(batch.policy_versions[0][3].item<int64_t>(), 3);
  // The prefix counts against the row limit.
  EXPECT_THROW(pack_windows({fragment(4, 100, 3)}, 7), InvalidArgumentError);
}

// The three ways a fragment ends, kept apart: a terminated episode bootstraps from 0, a
// truncated one and one that goes on from the value of the observation after the last step.
TEST(Returns, FragmentsBootstrapFromTheNextObservationUnlessTheEpisodeTerminated) {
  Episode terminated = episode_of_length(3, /*terminated=*/true);
  Episode truncated = episode_of_length(3, /*terminated=*/false);
  Episode goes_on = fragment(3, /*first_step=*/50, /*context=*/0);
  goes_on.is_init[0] = 1;  // a context restarted here: no prefix
  const WindowBatch batch = pack_windows({terminated, truncated, goes_on}, 16);
  const at::Tensor values = torch::full({batch.rows(), batch.width()}, 2.0f);
  ReturnOptions options;
  options.gamma = 0.5;
  options.gae_lambda = 1.0;
  const at::Tensor advantages = episode_advantages(batch, values, options);
  // Last step: A = r + gamma * bootstrap - V = 1 + 0.5 * {0, 2, 2} - 2.
  auto last_advantage = [&](size_t index) {
    const EpisodeSlot& slot = batch.slots[index];
    return advantages[slot.row][slot.offset + slot.length - 1].item<double>();
  };
  EXPECT_DOUBLE_EQ(last_advantage(0), -1.0);
  EXPECT_DOUBLE_EQ(last_advantage(1), 0.0);
  EXPECT_DOUBLE_EQ(last_advantage(2), 0.0);
  EXPECT_FALSE(goes_on.ends_episode());
  EXPECT_TRUE(truncated.ends_episode());
}

TEST(Returns, GaeMatchesAHandComputation) {
  const at::Tensor rewards = torch::tensor({1.0f, 0.0f, 2.0f});
  const at::Tensor values = torch::tensor({0.5f, 1.0f, 1.5f});
  const double g = 0.9, l = 0.8, bootstrap = 3.0;
  const double d2 = 2.0 + g * bootstrap - 1.5, d1 = 0.0 + g * 1.5 - 1.0, d0 = 1.0 + g * 1.0 - 0.5;
  const double a2 = d2, a1 = d1 + g * l * a2, a0 = d0 + g * l * a1;
  const at::Tensor advantages = generalized_advantages(rewards, values, bootstrap, g, l);
  EXPECT_NEAR(advantages[0].item<double>(), a0, 1e-5);
  EXPECT_NEAR(advantages[1].item<double>(), a1, 1e-5);
  EXPECT_NEAR(advantages[2].item<double>(), a2, 1e-5);
  // Termination bootstraps from zero, truncation from V(final state).
  EXPECT_LT(generalized_advantages(rewards, values, 0.0, g, l)[2].item<double>(), a2);
}

TEST(Returns, OnPolicyVTraceIsTheDiscountedReturn) {
  const at::Tensor rewards = torch::tensor({1.0f, 2.0f, 3.0f});
  const at::Tensor values = torch::tensor({0.3f, -0.2f, 0.7f});
  const double g = 0.5, bootstrap = 4.0;
  const VTraceTargets targets = vtrace_targets(rewards, values, bootstrap, torch::zeros({3}), g, 1.0, 1.0);
  EXPECT_NEAR(targets.vs[2].item<double>(), 3 + g * 4, 1e-5);
  EXPECT_NEAR(targets.vs[1].item<double>(), 2 + g * 3 + g * g * 4, 1e-5);
  EXPECT_NEAR(targets.vs[0].item<double>(), 1 + g * 2 + g * g * 3 + g * g * g * 4, 1e-5);
  EXPECT_NEAR(targets.pg_advantages[0].item<double>(), 1 + g * targets.vs[1].item<double>() - 0.3, 1e-5);
}

TEST(Returns, VTraceClipsImportanceWeights) {
  const at::Tensor log_rhos = torch::tensor({std::log(5.0f), std::log(0.5f)});
  const VTraceTargets targets =
      vtrace_targets(torch::ones({2}), torch::zeros({2}), 0.0, log_rhos, 0.9, /*rho_bar=*/1.0, /*c_bar=*/1.0);
  EXPECT_NEAR(targets.clipped_rhos[0].item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(targets.clipped_rhos[1].item<double>(), 0.5, 1e-6);
}

// A one-step bandit: action 1 pays 1, action 0 pays 0. Both algorithms must learn it.
class BanditLearning : public ::testing::TestWithParam<std::string> {};

TEST_P(BanditLearning, RaisesTheProbabilityOfThePayingArm) {
  torch::manual_seed(0);
  const ActorCriticOptions model_options = two_action_model(16, 4);
  auto model = std::make_shared<ActorCritic>(model_options);
  LearnerOptions options;
  options.algorithm = GetParam().starts_with("vtrace") ? "vtrace" : "ppo";
  options.decoupled = GetParam() != "ppo_classic";
  if (GetParam() == "vtrace_normalized") options.advantage_normalization = "minibatch";
  options.learning_rate = 3e-3;
  options.entropy_coef = 0.0;
  Learner learner(model, options, std::make_shared<LocalCommunicator>());
  at::Generator generator = at::detail::createCPUGenerator(/*seed=*/1);
  auto probability_of_paying_arm = [&] {
    model->trunk().reset_cache();
    const PolicyWindow window = model->evaluate(torch::ones({1, 1, 2}), torch::ones({1, 1}, torch::kBool));
    return torch::softmax(window.policy, -1)[0][0][1].item<double>();
  };
  const double before = probability_of_paying_arm();
  for (int update = 0; update < 40; ++update) {
    std::vector<Episode> batch;
    model->trunk().reset_cache();
    const PolicyStep step = model->act(torch::ones({32, 2}), torch::ones({32}, torch::kBool), generator);
    for (int i = 0; i < 32; ++i) {
      Episode e = episode_of_length(1, /*terminated=*/true, step.actions[i][0].item<float>());
      e.observations = {1.0f, 1.0f};
      e.actions = {step.actions[i][0].item<float>()};
      e.behaviour_log_probs = {step.log_probs[i].item<float>()};
      batch.push_back(e);
    }
    const UpdateStats stats = learner.update(batch);
    EXPECT_TRUE(std::isfinite(stats.policy_loss));
  }
  EXPECT_GT(probability_of_paying_arm(), 0.9) << "started at " << before;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, BanditLearning,
                         ::testing::Values("ppo", "ppo_classic", "vtrace", "vtrace_normalized"));

// Stale behaviour log-probs (the actors acted with older weights): classic PPO's ratio
// starts far from 1 and is clipped everywhere; decoupled PPO's ratio starts at 1 against
// the learner's own policy and the staleness goes into weights truncated at rho_bar.
TEST(Learner, DecoupledPpoClipsAgainstTheLearnersPolicyNotTheStaleBehaviour) {
  auto first_minibatch_stats = [](bool decoupled) {
    torch::manual_seed(0);
    const ActorCriticOptions model_options = two_action_model(8, 8);
    LearnerOptions options;
    options.decoupled = decoupled;
    options.epochs = 1;
    options.minibatches = 1;
    options.rho_bar = 1.0;
    Learner learner(std::make_shared<ActorCritic>(model_options), options,
                    std::make_shared<LocalCommunicator>());
    std::vector<Episode> batch;
    for (int i = 0; i < 4; ++i) {
      Episode e = episode_of_length(5);
      // A near-uniform policy has log-prob about log(0.5); the actors claimed log(0.1).
      for (float& lp : e.behaviour_log_probs) lp = std::log(0.1f);
      batch.push_back(e);
    }
    return learner.update(batch);
  };
  const UpdateStats classic = first_minibatch_stats(false);
  const UpdateStats decoupled = first_minibatch_stats(true);
  EXPECT_DOUBLE_EQ(classic.clip_fraction, 1.0);
  EXPECT_DOUBLE_EQ(decoupled.clip_fraction, 0.0);
  EXPECT_NEAR(decoupled.approx_kl, 0.0, 1e-7);
  EXPECT_DOUBLE_EQ(decoupled.rho_max, 1.0);  // pi/mu is about 5, truncated at rho_bar
  EXPECT_DOUBLE_EQ(decoupled.rho_mean, 1.0);
}

// How the loss terms combine, seen from what training does to the model: with only the
// entropy bonus weighing in, the policy's entropy goes up; with the value loss, the values
// go to the returns (gamma^k-discounted rewards-to-go with lambda = 1, whatever the values
// were), not to the advantages or anything else.
std::vector<Episode> fixed_batch() {
  return {episode_of_length(3), episode_of_length(5), episode_of_length(4), episode_of_length(6)};
}

double mean_entropy(ActorCritic& model, const WindowBatch& batch) {
  torch::NoGradGuard no_grad;
  const PolicyWindow window = model.evaluate(batch.observations, batch.is_init);
  return model.entropy(window).masked_select(batch.step_mask).mean().item<double>();
}

TEST(Learner, TheEntropyBonusRaisesTheEntropy) {
  torch::manual_seed(3);
  auto model = std::make_shared<ActorCritic>(two_action_model(16, 8));
  LearnerOptions options;
  options.entropy_coef = 10.0;  // dwarfs the clipped surrogate
  options.value_coef = 0.0;
  options.learning_rate = 3e-3;
  {
    torch::NoGradGuard no_grad;  // start from a peaked policy, far below the uniform's log 2
    model->named_parameters()["policy_head.bias"][0] += 3.0;
  }
  Learner learner(model, options, std::make_shared<LocalCommunicator>());
  const WindowBatch batch = pack_windows(fixed_batch(), 8);
  const double before = mean_entropy(*model, batch);
  ASSERT_LT(before, 0.3);
  for (int update = 0; update < 10; ++update) learner.update(fixed_batch());
  EXPECT_GT(mean_entropy(*model, batch), before + 0.5 * (std::log(2.0) - before)) << "started at " << before;
}

TEST(Learner, TheValueLossFitsTheValuesToTheReturns) {
  torch::manual_seed(4);
  auto model = std::make_shared<ActorCritic>(two_action_model(16, 8));
  LearnerOptions options;
  options.gamma = 0.9;
  options.gae_lambda = 1.0;  // returns = discounted reward-to-go, independent of the values
  options.entropy_coef = 0.0;
  options.learning_rate = 3e-3;
  Learner learner(model, options, std::make_shared<LocalCommunicator>());
  const WindowBatch batch = pack_windows(fixed_batch(), 8);
  at::Tensor returns = torch::zeros_like(batch.rewards);  // every episode terminated, reward 1
  for (const EpisodeSlot& slot : batch.slots) {
    for (int64_t t = 0; t < slot.length; ++t) {
      returns[slot.row][slot.offset + t] = (1 - std::pow(0.9, slot.length - t)) / (1 - 0.9);
    }
  }
  auto value_error = [&] {
    torch::NoGradGuard no_grad;
    const at::Tensor values = model->evaluate(batch.observations, batch.is_init).values;
    return (values - returns).abs().masked_select(batch.step_mask).mean().item<double>();
  };
  const double before = value_error();
  for (int update = 0; update < 60; ++update) learner.update(fixed_batch());
  const double mean_return = returns.masked_select(batch.step_mask).mean().item<double>();
  EXPECT_LT(value_error(), 0.1 * mean_return) << "started at " << before << ", mean return " << mean_return;
}

// Linear schedules fall from their full value at the first update to 0 at planned_updates
// and stay there; a constant one stays put.
TEST(Learner, LinearSchedulesTakeTheRateAndTheEntropyWeightToZeroAtThePlannedUpdates) {
  for (const std::string entropy_schedule : {"linear", "constant"}) {
    torch::manual_seed(6);
    LearnerOptions options;
    options.lr_schedule = "linear";
    options.entropy_schedule = entropy_schedule;
    options.learning_rate = 1e-3;
    options.entropy_coef = 0.02;
    options.planned_updates = 4;
    Learner learner(std::make_shared<ActorCritic>(two_action_model(8, 8)), options,
                    std::make_shared<LocalCommunicator>());
    for (int update = 0; update < 6; ++update) {
      const UpdateStats stats = learner.update(fixed_batch());
      const double left = std::max(0.0, 1.0 - update / 4.0);
      EXPECT_NEAR(stats.learning_rate, 1e-3 * left, 1e-12) << "update " << update;
      EXPECT_NEAR(stats.entropy_coef, entropy_schedule == "linear" ? 0.02 * left : 0.02, 1e-12)
          << entropy_schedule << ", update " << update;
    }
  }
}

// The parameters after one PPO update of a fresh model (seeded alike) with `configure`d
// options, and after `updates` updates when asked.
at::Tensor parameters_after_updates(const std::function<void(LearnerOptions&)>& configure, int updates = 1) {
  torch::manual_seed(5);
  auto model = std::make_shared<ActorCritic>(two_action_model(16, 8));
  LearnerOptions options;
  options.learning_rate = 1e-2;
  options.entropy_coef = 0.0;
  configure(options);
  Learner learner(model, options, std::make_shared<LocalCommunicator>());
  std::vector<Episode> batch = fixed_batch();
  for (size_t i = 0; i < batch.size(); ++i) {
    for (float& reward : batch[i].rewards) reward = static_cast<float>(i % 2);  // advantages of both signs
  }
  for (int update = 0; update < updates; ++update) learner.update(batch);
  std::vector<at::Tensor> flat;
  for (const at::Tensor& parameter : model->parameters()) flat.push_back(parameter.detach().flatten());
  return torch::cat(flat);
}

double largest_difference(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

// With one minibatch of the whole batch, standardising per minibatch is standardising per
// batch; with two, each minibatch's own mean and spread give different steps.
TEST(Learner, MinibatchAdvantageNormalizationDiffersFromTheBatchsOnlyWithSeveralMinibatches) {
  auto with = [](const std::string& scope, int64_t minibatches) {
    return parameters_after_updates([&](LearnerOptions& o) {
      o.advantage_normalization = scope;
      o.minibatches = minibatches;
      o.epochs = 1;
    });
  };
  // Adam's first steps are about the gradient's sign times the rate (1e-2): a parameter whose
  // gradient is ~0 may move by float noise, so "alike" is within 1% of a step.
  EXPECT_LT(largest_difference(with("minibatch", 1), with("batch", 1)), 1e-4);
  EXPECT_GT(largest_difference(with("minibatch", 2), with("batch", 2)), 1e-3);
  EXPECT_GT(largest_difference(with("none", 1), with("batch", 1)), 1e-3);
}

// V-trace's policy-gradient advantages are standardised per minibatch only when asked.
TEST(Learner, VTraceStandardisesItsAdvantagesPerMinibatchOnlyWhenAsked) {
  auto with = [](const std::string& scope) {
    return parameters_after_updates([&](LearnerOptions& o) {
      o.algorithm = "vtrace";
      o.advantage_normalization = scope;
      o.minibatches = 2;
      o.epochs = 1;
    });
  };
  EXPECT_LT(largest_difference(with("auto"), with("none")), 1e-4);
  EXPECT_GT(largest_difference(with("minibatch"), with("none")), 1e-3);
}

// Recomputing the advantages before the second epoch is what a second update on the same
// batch does (one minibatch, constant rate, no value clip: the rest of PPO's targets are
// the same); without it, the second epoch still uses the first epoch's advantages.
TEST(Learner, RecomputedAdvantagesMakeEachEpochAFreshUpdateOfTheBatch) {
  auto two_epochs = [](bool recompute) {
    return parameters_after_updates([&](LearnerOptions& o) {
      o.recompute_advantages = recompute;
      o.epochs = 2;
      o.minibatches = 1;
    });
  };
  const at::Tensor two_single_epoch_updates = parameters_after_updates(
      [](LearnerOptions& o) {
        o.epochs = 1;
        o.minibatches = 1;
      },
      /*updates=*/2);
  EXPECT_LT(largest_difference(two_epochs(true), two_single_epoch_updates), 1e-4);
  EXPECT_GT(largest_difference(two_epochs(false), two_single_epoch_updates), 1e-3);
}

// Masked steps count for nothing: the real steps 1..6 have mean 3.5 and unbiased std
// sqrt(3.5), whatever the masked ones hold; a lone real step keeps a unit scale.
TEST(PolicyLosses, NormalizedAdvantagesStandardiseTheRealStepsOnly) {
  const at::Tensor advantages = torch::tensor({{1.0f, 2.0f, 3.0f, 100.0f}, {4.0f, -50.0f, 5.0f, 6.0f}});
  const at::Tensor mask = torch::tensor({{true, true, true, false}, {true, false, true, true}});
  const at::Tensor real = normalized_advantages(advantages, mask).masked_select(mask);
  const at::Tensor expected = (torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}) - 3.5f) / std::sqrt(3.5f);
  EXPECT_TRUE(torch::allclose(real, expected, 1e-5, 1e-6)) << real;
  const at::Tensor lone =
      normalized_advantages(torch::tensor({{7.0f, 9.0f}}), torch::tensor({{true, false}}));
  EXPECT_NEAR(lone[0][0].item<double>(), 0.0, 1e-6);
  EXPECT_NEAR(lone[0][1].item<double>(), 2.0, 1e-5);  // (9 - 7) / 1
}

TEST(Learner, RejectsAdvantageOptionsTheAlgorithmCannotHonour) {
  LearnerOptions options;
  options.advantage_normalization = "epoch";
  try {
    Learner learner(std::make_shared<ActorCritic>(two_action_model(8, 4)), options,
                    std::make_shared<LocalCommunicator>());
    FAIL();
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(),
                 "learner.advantage_normalization (epoch) must be auto, batch, minibatch or none");
  }
  auto refusal = [](const LearnerOptions& o) -> std::string {
    try {
      Learner learner(std::make_shared<ActorCritic>(two_action_model(8, 4)), o,
                      std::make_shared<LocalCommunicator>());
    } catch (const InvalidArgumentError& error) {
      return error.what();
    }
    return "accepted";
  };
  options.algorithm = "vtrace";
  options.advantage_normalization = "batch";
  EXPECT_NE(
      refusal(options).find(
          "learner.advantage_normalization (batch): V-trace computes its targets one minibatch at a time"),
      std::string::npos)
      << refusal(options);
  options.advantage_normalization = "minibatch";
  EXPECT_EQ(refusal(options), "accepted");
  options.recompute_advantages = true;
  EXPECT_NE(refusal(options).find(
                "learner.recompute_advantages (true): expected false with learner.algorithm = vtrace"),
            std::string::npos)
      << refusal(options);
}

TEST(Learner, RejectsUnknownAlgorithmNamingIt) {
  const ActorCriticOptions model_options = two_action_model(8, 4);
  LearnerOptions options;
  options.algorithm = "a2c";
  try {
    Learner learner(std::make_shared<ActorCritic>(model_options), options,
                    std::make_shared<LocalCommunicator>());
    FAIL();
  } catch (const InvalidArgumentError& error) {
    EXPECT_STREQ(error.what(), "learner.algorithm (a2c) must be ppo or vtrace");
  }
}

}  // namespace
}  // namespace kvrl
