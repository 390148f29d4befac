// Issue #19's exactness check: for every context policy (segment, sliding window), position
// scheme (learned, rotary) and weight-update policy (restart, reprefill, keep), the
// learner's log-probabilities and values of a fragment's trained steps, evaluated with the
// weights that acted, equal what the actor computed when it acted, to 1e-5 in float32.
// The fragments start mid-episode, cross segment restarts and follow weight updates. Under
// `keep` the actor's context holds keys and values of older weights after an update: the
// steps whose reach holds only their own version's steps still match, and the others
// differ; nothing else does.
//
// A real ActorLoop steps RepeatPrevious (four decks, about 207 steps an episode, far past
// max_seq_len = 16) against a scripted learner over InProcessTransport that sends a new
// weight version every few fragments and keeps every version to evaluate with. The *_async
// cases step three environments of unequal speed asynchronously, so the policy steps
// whichever streams are ready (partial-batch stepping) through the same restarts and updates.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actor/actor_loop.h"
#include "actor/env_registry.h"
#include "actor/policy_fit.h"
#include "actor/vector_env.h"
#include "common/comm/in_process_transport.h"
#include "common/comm/parameter_vector.h"
#include "common/support/logger.h"
#include "common/wire/weights_codec.h"
#include "learner/window_batch.h"

namespace kvrl {
namespace {

constexpr int64_t kMaxSeqLen = 16;
constexpr int64_t kWindow = 6;
constexpr int64_t kLayers = 2;
constexpr int64_t kFragmentSteps = 10;
constexpr int64_t kEnvs = 3;
constexpr int64_t kFragmentsToCollect = 150;
constexpr int64_t kFragmentsPerVersion = 4;
constexpr double kTolerance = 1e-5;
const EnvOptions kEnvOptions = {{"num_decks", 4}, {"k", 4}};

struct ContextSetup {
  std::string name;
  PositionEncoding positions;
  int64_t window;  // 0: segment policy
  WeightUpdatePolicy on_update;
  // How the environments step: in the actor's thread; on threads in lockstep, finishing in
  // an order other than their index's; or asynchronously, the policy stepping whichever
  // are ready (partial-batch steps, TransformerModule::step_streams).
  enum class Stepping { kInThread, kLockstepPool, kAsync } stepping = Stepping::kInThread;

  int64_t segment_steps() const { return window == 0 ? kMaxSeqLen - 1 : 0; }
  int64_t reach() const { return window == 0 ? kMaxSeqLen - 2 : kLayers * (window - 1); }
};

void PrintTo(const ContextSetup& setup, std::ostream* out) { *out << setup.name; }

ActorCriticOptions policy_for(const Environment& env, const ContextSetup& setup) {
  ActorCriticOptions options;
  const PolicyShape shape = policy_shape_for(env.observation_space(), env.action_space());
  options.transformer.input_size = env.observation_space().flat_size();
  options.transformer.hidden_size = 16;
  options.transformer.num_layers = kLayers;
  options.transformer.num_heads = 2;
  options.transformer.max_seq_len = kMaxSeqLen;
  options.transformer.positions = setup.positions;
  options.transformer.attention_window = setup.window;
  options.discrete = shape.discrete;
  options.num_outputs = shape.num_outputs;
  return options;
}

struct Collected {
  std::vector<Episode> fragments;
  std::map<int64_t, std::vector<float>> weights;  // by policy version
  ActorStats actor;
};

std::vector<uint8_t> int64_bytes(int64_t value) {
  std::vector<uint8_t> bytes(sizeof(value));
  std::memcpy(bytes.data(), &value, sizeof(value));
  return bytes;
}

// The scripted learner: version 0, then a perturbed version every few fragments, credit
// back for every fragment, and a stop once enough fragments arrived.
Collected collect_fragments(const ContextSetup& setup) {
  at::set_num_threads(1);
  const std::unique_ptr<Environment> prototype = make_environment("RepeatPrevious", kEnvOptions);
  const ActorCriticOptions policy = policy_for(*prototype, setup);
  EpisodeSpec spec{prototype->observation_space().flat_size(),
                   prototype->action_space().flat_size(),
                   kFragmentSteps,
                   setup.reach(),
                   kEnvs,
                   setup.segment_steps()};
  const EpisodeCodec codec(spec);
  InProcessNetwork network(/*ranks=*/2, /*inbox_bound=*/64, /*flush_timeout_s=*/20);
  torch::manual_seed(7);
  auto actor_model = std::make_shared<ActorCritic>(policy);

  Collected collected;
  std::thread actor_thread([&] {
    InProcessTransport transport(network, 1);
    std::vector<std::unique_ptr<Environment>> envs;
    for (int64_t i = 0; i < kEnvs; ++i) envs.push_back(make_environment("RepeatPrevious", kEnvOptions));
    NativeStepping stepping;
    if (setup.stepping == ContextSetup::Stepping::kAsync) {
      stepping = {.asynchronous = true, .threads = kEnvs, .step_delays_s = {0, 2e-4, 8e-4}};
    } else if (setup.stepping == ContextSetup::Stepping::kLockstepPool) {
      stepping = {.asynchronous = false, .threads = kEnvs, .step_delays_s = {8e-4, 0, 2e-4}};
    }
    NativeVectorEnv env(std::move(envs), 11, stepping);
    ActorLoopOptions options;
    options.learner_ranks = {0};
    options.credit_steps = 4 * kFragmentSteps;
    options.seed = 3;
    options.on_weight_update = setup.on_update;
    options.fragment_steps = kFragmentSteps;
    options.segment_steps = setup.segment_steps();
    options.context_reach = setup.reach();
    ActorLoop loop(options, transport, actor_model, env, codec,
                   std::make_shared<Logger>(1, "actor", "", "error"));
    collected.actor = loop.run();
  });

  InProcessTransport transport(network, 0);
  torch::manual_seed(1);
  std::vector<float> weights = flatten_parameters(ActorCritic(policy).parameters());
  int64_t version = 0;
  auto publish = [&] {
    collected.weights[version] = weights;
    transport.send(1, MessageTag::kWeights, WeightsCodec::encode(version, weights));
  };
  publish();
  bool stopped = false;
  bool actor_done = false;
  at::Generator generator = at::detail::createCPUGenerator(99);
  while (!actor_done) {
    std::optional<Message> message = transport.poll();
    if (!message) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      continue;
    }
    if (message->tag == MessageTag::kActorDone) actor_done = true;
    if (message->tag != MessageTag::kEpisode || stopped) continue;
    collected.fragments.push_back(codec.decode(message->bytes));
    const auto received = static_cast<int64_t>(collected.fragments.size());
    if (received >= kFragmentsToCollect) {
      transport.send(1, MessageTag::kStop, {static_cast<uint8_t>(RunEnd::kFinished)});
      stopped = true;
      continue;
    }
    if (received % kFragmentsPerVersion == 0) {
      const at::Tensor noise = at::randn({static_cast<int64_t>(weights.size())}, generator) * 0.05;
      for (size_t i = 0; i < weights.size(); ++i) weights[i] += noise[static_cast<int64_t>(i)].item<float>();
      ++version;
      publish();
    }
    transport.send(1, MessageTag::kCredit, int64_bytes(collected.fragments.back().length()));
  }
  actor_thread.join();
  return collected;
}

// Per stream and episode, the version and the context start of every step, from all the
// fragments: what the actor's context held when it acted.
struct EpisodeTimeline {
  std::map<int64_t, int64_t> version;  // by step number
  std::map<int64_t, bool> is_init;
};

std::map<std::pair<int64_t, uint64_t>, EpisodeTimeline> timelines_of(const std::vector<Episode>& fragments) {
  std::map<std::pair<int64_t, uint64_t>, EpisodeTimeline> timelines;
  for (const Episode& f : fragments) {
    EpisodeTimeline& timeline = timelines[{f.stream, f.episode_id}];
    for (int64_t t = 0; t < f.length(); ++t) {
      timeline.version[f.first_step + t] = f.policy_versions[t];
      timeline.is_init[f.first_step + t] = f.is_init[t] != 0;
    }
  }
  return timelines;
}

// Whether every step the policy's output at `step` depends on was acted by its version.
bool context_of_one_version(const EpisodeTimeline& timeline, int64_t step, const ContextSetup& setup) {
  const int64_t version = timeline.version.at(step);
  for (int64_t s = step; s >= 0 && step - s <= setup.reach(); --s) {
    if (timeline.version.at(s) != version) return false;
    if (timeline.is_init.at(s)) return true;
  }
  return true;
}

struct Comparison {
  int64_t matching = 0, differing = 0;  // steps within / beyond the tolerance
  int64_t pure_differing = 0;           // of them, steps whose context is one version yet differ
  int64_t mixed_matching = 0;           // steps with an older version's keys in reach that match
  double worst_pure_error = 0;
  int64_t mid_episode = 0, across_restarts = 0, after_updates = 0;  // fragments of each kind
};

Comparison compare(const Collected& collected, const ContextSetup& setup) {
  const std::unique_ptr<Environment> prototype = make_environment("RepeatPrevious", kEnvOptions);
  ActorCritic model(policy_for(*prototype, setup));
  std::vector<at::Tensor> parameters = model.parameters();
  const auto timelines = timelines_of(collected.fragments);
  Comparison result;
  torch::NoGradGuard no_grad;
  for (const Episode& f : collected.fragments) {
    result.mid_episode += f.first_step > 0 ? 1 : 0;
    for (int64_t t = 1; t < f.length(); ++t) {
      if (f.is_init[t] && f.policy_versions[t] == f.policy_versions[t - 1]) {
        ++result.across_restarts;
        break;
      }
    }
    result.after_updates += f.policy_versions.front() != f.policy_versions.back() ? 1 : 0;
    const WindowBatch batch = pack_windows({f}, /*max_tokens=*/1 << 20);
    const int64_t offset = batch.slots.front().offset;
    std::map<int64_t, bool> versions;
    for (int64_t v : f.policy_versions) versions[v] = true;
    for (const auto& [version, unused] : versions) {
      assign_parameters(collected.weights.at(version), parameters);
      const PolicyWindow window = model.evaluate(batch.observations, batch.is_init);
      const at::Tensor log_probs = model.log_prob(window, batch.actions);
      for (int64_t t = 0; t < f.length(); ++t) {
        if (f.policy_versions[t] != version) continue;
        const double error =
            std::max(std::abs(log_probs[0][offset + t].item<double>() - f.behaviour_log_probs[t]),
                     std::abs(window.values[0][offset + t].item<double>() - f.values[t]));
        const bool pure =
            setup.on_update != WeightUpdatePolicy::kKeep ||
            context_of_one_version(timelines.at({f.stream, f.episode_id}), f.first_step + t, setup);
        const bool matches = error <= kTolerance;
        (matches ? result.matching : result.differing) += 1;
        if (pure && !matches) ++result.pure_differing;
        if (!pure && matches) ++result.mixed_matching;
        if (pure) result.worst_pure_error = std::max(result.worst_pure_error, error);
      }
    }
  }
  return result;
}

class FragmentExactness : public ::testing::TestWithParam<ContextSetup> {};

TEST_P(FragmentExactness, TheLearnerRecomputesWhatTheActorComputedForEveryTrainedStep) {
  const ContextSetup& setup = GetParam();
  const Collected collected = collect_fragments(setup);
  const Comparison result = compare(collected, setup);
  // The fragments cover what the issue names.
  EXPECT_GT(result.mid_episode, 50);
  EXPECT_GT(result.after_updates, 10);
  if (setup.window == 0) {
    EXPECT_GT(result.across_restarts, 5);
    EXPECT_GT(collected.actor.segment_restarts, 0);
  }
  EXPECT_GT(collected.actor.context_prefix_steps, 0);
  if (setup.stepping == ContextSetup::Stepping::kAsync) {
    EXPECT_GT(collected.actor.partial_policy_steps, collected.actor.policy_steps / 2);
  } else {
    EXPECT_EQ(collected.actor.partial_policy_steps, 0);
  }
  EXPECT_EQ(result.pure_differing, 0) << "worst error " << result.worst_pure_error;
  EXPECT_LE(result.worst_pure_error, kTolerance);
  if (setup.on_update == WeightUpdatePolicy::kKeep) {
    // Stale keys and values change what the actor computed, step after step, until the
    // context restarts or slides past them: the learner, recomputing, differs there.
    EXPECT_GT(result.differing, 20);
    EXPECT_GT(collected.actor.contexts_kept_stale, 0);
  } else {
    EXPECT_EQ(result.differing, 0);
  }
  std::printf(
      "[ %s ] %lld steps match, %lld differ (worst matching error %.2e); fragments: %lld "
      "mid-episode, %lld across a restart, %lld across an update\n",
      setup.name.c_str(), static_cast<long long>(result.matching), static_cast<long long>(result.differing),
      result.worst_pure_error, static_cast<long long>(result.mid_episode),
      static_cast<long long>(result.across_restarts), static_cast<long long>(result.after_updates));
}

INSTANTIATE_TEST_SUITE_P(
    EveryPolicy, FragmentExactness,
    ::testing::Values(
        ContextSetup{"segment_learned_restart", PositionEncoding::kLearned, 0, WeightUpdatePolicy::kRestart},
        ContextSetup{"segment_learned_reprefill", PositionEncoding::kLearned, 0,
                     WeightUpdatePolicy::kReprefill},
        ContextSetup{"segment_learned_keep", PositionEncoding::kLearned, 0, WeightUpdatePolicy::kKeep},
        ContextSetup{"segment_rotary_reprefill", PositionEncoding::kRotary, 0,
                     WeightUpdatePolicy::kReprefill},
        ContextSetup{"sliding_rotary_restart", PositionEncoding::kRotary, kWindow,
                     WeightUpdatePolicy::kRestart},
        ContextSetup{"sliding_rotary_reprefill", PositionEncoding::kRotary, kWindow,
                     WeightUpdatePolicy::kReprefill},
        ContextSetup{"sliding_rotary_keep", PositionEncoding::kRotary, kWindow, WeightUpdatePolicy::kKeep},
        ContextSetup{"segment_learned_restart_async", PositionEncoding::kLearned, 0,
                     WeightUpdatePolicy::kRestart, ContextSetup::Stepping::kAsync},
        ContextSetup{"segment_learned_reprefill_async", PositionEncoding::kLearned, 0,
                     WeightUpdatePolicy::kReprefill, ContextSetup::Stepping::kAsync},
        ContextSetup{"sliding_rotary_reprefill_async", PositionEncoding::kRotary, kWindow,
                     WeightUpdatePolicy::kReprefill, ContextSetup::Stepping::kAsync},
        ContextSetup{"sliding_rotary_keep_async", PositionEncoding::kRotary, kWindow,
                     WeightUpdatePolicy::kKeep, ContextSetup::Stepping::kAsync},
        ContextSetup{"segment_learned_reprefill_pool", PositionEncoding::kLearned, 0,
                     WeightUpdatePolicy::kReprefill, ContextSetup::Stepping::kLockstepPool}),
    [](const ::testing::TestParamInfo<ContextSetup>& info) { return info.param.name; });

}  // namespace
}  // namespace kvrl
