// The config loader: what a resumed run reads back, and YAML that once crashed or hung it
// under libFuzzer (tests/fuzz/train_config_fuzz.cpp, tests/fuzz/crashers/train_config/).
#include "launch/train_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "common/support/errors.h"

namespace kvrl {
namespace {

std::string refusal(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    TrainConfig::parse(yaml, overrides);
  } catch (const InvalidArgumentError& error) {
    return error.what();
  }
  return "accepted";
}

// A resumed run reads RUN_DIR/config.yaml, the effective config, and checks each
// checkpoint's copy of it against itself.
TEST(TrainConfig, EffectiveConfigParsesBackToTheSameConfig) {
  const TrainConfig config = TrainConfig::parse(
      "run:\n  dir: \"runs/a: b # c\"\nlearner:\n  learning_rate: 0.000123456789\n"
      "env:\n  plugin: \"null\"\n  options:\n    scale: 1234567\n    \"odd: name\": 0.1\n",
      {"actor.device=cuda:1", "status.address=::1", "env.name=-"});
  const std::string yaml = config.to_yaml();
  const TrainConfig back = TrainConfig::parse(yaml, {});
  EXPECT_EQ(back.to_yaml(), yaml);
  EXPECT_EQ(back.run_dir, "runs/a: b # c");
  EXPECT_EQ(back.env_plugin, "null");
  EXPECT_EQ(back.env_name, "-");
  EXPECT_EQ(back.learner.learning_rate, 0.000123456789);
  EXPECT_EQ(back.env_options.at("scale"), 1234567);
  EXPECT_EQ(back.env_options.at("odd: name"), 0.1);
  EXPECT_EQ(config.model_difference(back), "");
}

TEST(TrainConfig, EffectiveConfigWritesNumbersWithSixDigitsWhereTheyDo) {
  const std::string yaml = TrainConfig::parse("learner:\n  gamma: 0.99\n", {}).to_yaml();
  EXPECT_NE(yaml.find("\nlearner.gamma: 0.99\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("\ncheckpoint.interval_s: 600\n"), std::string::npos) << yaml;
}

// Heartbeats go out every second (a tenth of the timeout below 10 s): a timeout under 2 s
// would end healthy runs on a loaded machine.
TEST(TrainConfig, PeerTimeoutIsOffOrAtLeastTwoSeconds) {
  EXPECT_EQ(refusal("", {"run.peer_timeout_s=0"}), "accepted");
  EXPECT_EQ(refusal("", {"run.peer_timeout_s=2"}), "accepted");
  EXPECT_EQ(TrainConfig::parse("", {}).peer_timeout_s, 30);
  const std::string low = refusal("", {"run.peer_timeout_s=1.5"});
  EXPECT_NE(low.find("'run.peer_timeout_s' = '1.5'"), std::string::npos) << low;
  EXPECT_NE(low.find("expected 0 (no heartbeats) or at least 2 seconds"), std::string::npos) << low;
  EXPECT_NE(refusal("", {"run.peer_timeout_s=-1"}).find("a number in [0, 86400]"), std::string::npos);
}

// V-trace's targets exist one minibatch at a time: a batch-wide standardisation or a
// per-epoch recompute cannot apply, and saying so beats ignoring the key.
TEST(TrainConfig, AdvantageKeysTheAlgorithmCannotHonourAreRefusedByName) {
  EXPECT_EQ(refusal("", {"learner.algorithm=vtrace", "learner.advantage_normalization=minibatch"}),
            "accepted");
  EXPECT_EQ(refusal("", {"learner.advantage_normalization=batch", "learner.recompute_advantages=true"}),
            "accepted");
  const std::string batch =
      refusal("", {"learner.algorithm=vtrace", "learner.advantage_normalization=batch"});
  EXPECT_NE(batch.find("'learner.advantage_normalization' = 'batch'"), std::string::npos) << batch;
  EXPECT_NE(batch.find("expected auto, minibatch or none"), std::string::npos) << batch;
  const std::string recompute =
      refusal("", {"learner.algorithm=vtrace", "learner.recompute_advantages=true"});
  EXPECT_NE(recompute.find("'learner.recompute_advantages' = 'true'"), std::string::npos) << recompute;
  EXPECT_NE(recompute.find("expected false with learner.algorithm = vtrace"), std::string::npos) << recompute;
  const std::string unknown = refusal("", {"learner.advantage_normalization=epoch"});
  EXPECT_NE(unknown.find("auto batch minibatch none"), std::string::npos) << unknown;
}

TEST(TrainConfig, WindowAttentionIsEpisodesOrWhole) {
  EXPECT_EQ(TrainConfig::parse("", {}).learner_window_attention, "episodes");
  EXPECT_EQ(TrainConfig::parse("", {"learner.window_attention=whole"}).learner_window_attention, "whole");
  const std::string tiles = refusal("", {"learner.window_attention=tiles"});
  EXPECT_NE(tiles.find("'learner.window_attention' = 'tiles'"), std::string::npos) << tiles;
  EXPECT_NE(tiles.find("episodes whole"), std::string::npos) << tiles;
}

// The context keys must agree, and each refusal names the keys and what is allowed.
TEST(TrainConfig, ContextPolicyPositionsAndWindowMustAgree) {
  EXPECT_EQ(refusal("", {"model.context=sliding", "model.positions=rotary", "model.attention_window=32"}),
            "accepted");
  const std::string learned = refusal("", {"model.context=sliding"});
  EXPECT_NE(learned.find("model.context = sliding needs model.positions = rotary"), std::string::npos)
      << learned;
  const std::string wide =
      refusal("", {"model.context=sliding", "model.positions=rotary", "model.attention_window=600"});
  EXPECT_NE(wide.find("model.attention_window (600) must be in [0, model.max_seq_len = 512]"),
            std::string::npos)
      << wide;
  const std::string segment = refusal("", {"model.attention_window=32"});
  EXPECT_NE(segment.find("applies to model.context = sliding"), std::string::npos) << segment;
  const std::string odd =
      refusal("", {"model.positions=rotary", "model.hidden_size=12", "model.num_heads=4"});
  EXPECT_NE(odd.find("needs an even head size"), std::string::npos) << odd;
  EXPECT_NE(refusal("", {"actor.on_weight_update=stale"}).find("restart reprefill keep"), std::string::npos);
  // The old name, as older run directories' config.yaml holds it, maps exactly.
  EXPECT_EQ(TrainConfig::parse("actor:\n  keep_context_on_update: false\n", {}).on_weight_update, "restart");
  EXPECT_EQ(TrainConfig::parse("", {"actor.keep_context_on_update=true"}).on_weight_update, "reprefill");
  const std::string renamed = refusal("", {"actor.keep_context_on_update=maybe"});
  EXPECT_NE(renamed.find("replaced by actor.on_weight_update: true is reprefill"), std::string::npos)
      << renamed;
}

// The image encoder's keys: the layers' form, and no observation normaliser beside it.
TEST(TrainConfig, EncoderKeysAreCheckedAtParse) {
  const TrainConfig cnn = TrainConfig::parse("", {"model.encoder=cnn", "model.cnn_layers=16x3s1"});
  EXPECT_EQ(cnn.encoder, "cnn");
  EXPECT_EQ(cnn.cnn_layers, "16x3s1");
  const std::string layers = refusal("", {"model.encoder=cnn", "model.cnn_layers=16x3"});
  EXPECT_NE(layers.find("'model.cnn_layers' = '16x3'"), std::string::npos) << layers;
  EXPECT_NE(layers.find("does not read CHANNELSxKERNELsSTRIDE"), std::string::npos) << layers;
  EXPECT_NE(refusal("", {"model.encoder=resnet"}).find("one of mlp cnn"), std::string::npos);
  const std::string normalised = refusal("", {"model.encoder=cnn", "model.normalize_observations=true"});
  EXPECT_NE(normalised.find("does not apply with model.encoder = cnn"), std::string::npos) << normalised;
  const std::string critic = refusal("", {"model.encoder=cnn", "model.critic=mlp"});
  EXPECT_NE(critic.find("'model.critic' = 'mlp': the MLP critic reads the flat observation"),
            std::string::npos)
      << critic;
}

// The keys that take a list read a YAML sequence as they read a comma-separated string;
// any other key given a sequence is refused by name.
TEST(TrainConfig, ListKeysTakeAYamlSequence) {
  const TrainConfig listed =
      TrainConfig::parse("model:\n  encoder: cnn\n  cnn_layers: [16x2s1, 32x2s1]\n", {});
  const TrainConfig written = TrainConfig::parse("model:\n  encoder: cnn\n  cnn_layers: 16x2s1,32x2s1\n", {});
  EXPECT_EQ(listed.cnn_layers, written.cnn_layers);
  EXPECT_EQ(listed.cnn_layers, "16x2s1,32x2s1");
  const std::string scalar_key = refusal("learner:\n  learning_rate: [0.001, 0.002]\n");
  EXPECT_NE(scalar_key.find("'learner.learning_rate' must be a single value, not a list"), std::string::npos)
      << scalar_key;
  EXPECT_NE(scalar_key.find("env.gym_wrappers"), std::string::npos) << scalar_key;
  const std::string nested = refusal("model:\n  cnn_layers: [16x2s1, [32x2s1]]\n");
  EXPECT_NE(nested.find("'model.cnn_layers': each entry of its list must be one non-empty value"),
            std::string::npos)
      << nested;
  EXPECT_NE(refusal("model:\n  cnn_layers: ['16x2s1,32x2s1']\n").find("without commas"), std::string::npos);
}

// Every config the project ships loads: a key renamed or a bound tightened in the code
// fails here rather than in a user's first run.
TEST(TrainConfig, EveryShippedConfigLoads) {
  int configs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(KVRL_CONFIGS_DIR)) {
    if (entry.path().extension() != ".yaml") continue;
    ++configs;
    try {
      TrainConfig::load(entry.path().string(), {});
    } catch (const std::exception& error) {
      ADD_FAILURE() << entry.path() << ": " << error.what();
    }
  }
  EXPECT_GE(configs, 10) << "configs found in " << KVRL_CONFIGS_DIR;
}

TEST(TrainConfig, CriticKeys) {
  EXPECT_EQ(TrainConfig::parse("", {}).critic, "trunk");
  const TrainConfig mlp = TrainConfig::parse("", {"model.critic=mlp", "model.critic_hidden_size=128"});
  EXPECT_EQ(mlp.critic, "mlp");
  EXPECT_EQ(mlp.critic_hidden_size, 128);
  EXPECT_NE(refusal("", {"model.critic=separate"}).find("one of trunk mlp"), std::string::npos);
  EXPECT_NE(refusal("", {"model.critic_hidden_size=0"}).find("'model.critic_hidden_size' = '0'"),
            std::string::npos);
}

// Stepping keys: gym:<id> steps in Gymnasium's own vector loop, so only the default applies.
TEST(TrainConfig, AsynchronousSteppingIsForNativeEnvironments) {
  EXPECT_EQ(refusal("", {"env.stepping=async", "env.step_delay_ms=2", "env.step_delay_spread=4"}),
            "accepted");
  const std::string gym = refusal("", {"env.name=gym:CartPole-v1", "env.stepping=async"});
  EXPECT_NE(gym.find("'env.stepping' = 'async': gym:<id> environments step together"), std::string::npos)
      << gym;
  EXPECT_NE(refusal("", {"env.name=gym:CartPole-v1", "env.step_threads=2"}).find("'env.step_threads' = '2'"),
            std::string::npos);
  EXPECT_NE(refusal("", {"env.stepping=sometimes"}).find("one of lockstep async"), std::string::npos);
  EXPECT_NE(refusal("", {"env.step_delay_spread=0.5"}).find("a number in [1, 1000]"), std::string::npos);
}

// Batches are cut between two steps of every environment, each paid for in advance.
TEST(TrainConfig, BatchCollectionNeedsLockstepAndCreditForAStepOfEveryEnvironment) {
  EXPECT_EQ(refusal("", {"actor.collect=batches", "learner.credit_return=when_trained"}), "accepted");
  EXPECT_NE(refusal("", {"actor.collect=batches", "env.stepping=async"})
                .find("'actor.collect' = 'batches': batches are cut between two steps of every environment: "
                      "needs env.stepping = lockstep, not async"),
            std::string::npos);
  const std::string credit = refusal("", {"actor.collect=batches", "actor.credit_steps=8"});
  EXPECT_NE(credit.find("'actor.credit_steps' = '8'"), std::string::npos) << credit;
  EXPECT_NE(credit.find("(env.num_envs = 16)"), std::string::npos) << credit;
  EXPECT_EQ(refusal("", {"actor.credit_steps=8"}), "accepted") << "episodes need no credit for every stream";
}

// Remote actors: a port needs a token file, the address must be one, and the handshake's
// hash follows what the actor must share with the run and nothing it may choose itself.
TEST(TrainConfig, RemoteActorKeysAndTheirIdentityHash) {
  EXPECT_EQ(refusal("", {"remote.port=29500", "remote.token_file=run.token"}), "accepted");
  const std::string no_token = refusal("", {"remote.port=29500"});
  EXPECT_NE(no_token.find("remote actors need a shared token"), std::string::npos) << no_token;
  EXPECT_NE(refusal("", {"remote.address=learner-host"}).find("expected an IPv4 or IPv6 address"),
            std::string::npos);
  const uint64_t base = TrainConfig::parse("", {}).actor_identity_hash();
  for (const char* own : {"actor.device=cuda", "actor.threads=4", "env.stepping=async", "remote.port=1",
                          "run.seed=9", "learner.learning_rate=0.1"}) {
    EXPECT_EQ(TrainConfig::parse("", {own, "remote.token_file=t"}).actor_identity_hash(), base) << own;
  }
  for (const char* shared :
       {"model.hidden_size=32", "env.name=Pendulum-v1", "env.num_envs=4", "actor.fragment_steps=64",
        "actor.credit_steps=4096", "env.options.max_episode_steps=100"}) {
    EXPECT_NE(TrainConfig::parse("", {shared}).actor_identity_hash(), base) << shared;
  }
}

TEST(TrainConfig, RefusesTextThatIsNotUtf8) {
  EXPECT_EQ(refusal("run:\n  dir: caf\xc3\xa9\n"), "accepted");
  EXPECT_NE(refusal("run:\n  dir: caf\xe9\n").find("expected UTF-8 text"), std::string::npos);
  EXPECT_NE(refusal("", {"run.dir=\xed\xa0\x80"}).find("expected UTF-8 text"),
            std::string::npos);  // a surrogate
  EXPECT_NE(refusal("", {"env.options.\xc0\xaf=1"}).find("expected UTF-8 text"),
            std::string::npos);  // overlong
}

TEST(TrainConfig, RefusesAMapAliasedInsideItself) {
  // The walk over the YAML recursed until the stack overflowed.
  EXPECT_NE(refusal("a: &a {b: *a}\n").find("nests deeper than 16 levels"), std::string::npos);
}

TEST(TrainConfig, RefusesAliasesThatExpandExponentially) {
  // 40 maps, each aliasing the one before it twice: 2^40 values, which took forever.
  std::string yaml = "l0: &l0 {x: 1, y: 2}\n";
  for (int i = 1; i < 40; ++i) {
    const std::string before = "l" + std::to_string(i - 1);
    yaml +=
        "l" + std::to_string(i) + ": &l" + std::to_string(i) + " {a: *" + before + ", b: *" + before + "}\n";
  }
  EXPECT_NE(refusal(yaml).find("more than 10000 values"), std::string::npos);
}

}  // namespace
}  // namespace kvrl
