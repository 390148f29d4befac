#include "learner/checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "common/comm/local_communicator.h"
#include "common/io/torch_file.h"
#include "common/support/errors.h"
#include "common/support/logger.h"
#include "learner/learner.h"
#include "tests/device_under_test.h"
#include "tests/learner/learner_fixtures.h"

namespace kvrl {
namespace {

namespace fs = std::filesystem;
using fixtures::episode_of_length;
using fixtures::two_action_model;

std::unique_ptr<Learner> make_learner(uint64_t seed) {
  torch::manual_seed(seed);
  LearnerOptions options;
  options.epochs = 2;
  options.minibatches = 2;
  return std::make_unique<Learner>(std::make_shared<ActorCritic>(two_action_model(8, 16)), options,
                                   std::make_shared<LocalCommunicator>());
}

std::vector<Episode> batch() {
  return {episode_of_length(3), episode_of_length(5), episode_of_length(4, false)};
}

std::vector<at::Tensor> snapshot(Learner& learner) {
  std::vector<at::Tensor> copies;
  for (const auto& p : learner.model().parameters()) copies.push_back(p.detach().clone());
  return copies;
}

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::temp_directory_path() /
        ("kvrl_checkpoint_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    logger_ = std::make_unique<Logger>(0, "test", (dir_ / "test.log").string(), "info");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string log() const {
    std::ifstream in(dir_ / "test.log");
    return {std::istreambuf_iterator<char>(in), {}};
  }
  TrainingProgress progress_at(int64_t update) const {
    TrainingProgress p;
    p.updates = update;
    p.env_steps = 100 * update;
    p.policy_version = update;
    p.episodes_used = 3 * update;
    p.skipped_updates = 1;
    p.wall_seconds = 2.5;
    p.dropped = {{"shutdown", 2}, {"policy_lag", 1}};
    p.recent_returns = {10.0, 20.5};
    return p;
  }
  fs::path dir_;
  std::unique_ptr<Logger> logger_;
};

TEST_F(CheckpointTest, RestoresParametersOptimizerStateCountersAndRng) {
  auto trained = make_learner(1);
  trained->update(batch());
  trained->update(batch());
  const std::string path = (dir_ / "a.pt").string();
  write_checkpoint(path, *trained, progress_at(2), "model.hidden_size: 8\n");
  const at::Tensor expected_draws = torch::randperm(100);

  auto fresh = make_learner(2);
  ASSERT_FALSE(same(snapshot(*fresh), snapshot(*trained)));
  torch::manual_seed(99);
  const CheckpointContents contents = read_checkpoint(path, *fresh);
  EXPECT_TRUE(same(snapshot(*fresh), snapshot(*trained)));
  EXPECT_EQ(fresh->updates(), 2);
  EXPECT_EQ(contents.config_yaml, "model.hidden_size: 8\n");
  EXPECT_EQ(contents.progress.env_steps, 200);
  EXPECT_EQ(contents.progress.policy_version, 2);
  EXPECT_EQ(contents.progress.dropped.at("shutdown"), 2);
  EXPECT_EQ(contents.progress.recent_returns, (std::deque<double>{10.0, 20.5}));
  // The RNG continues where the saved learner's did.
  EXPECT_TRUE(torch::equal(torch::randperm(100), expected_draws));

  // Same state, same next update: the optimizer's moments came back too.
  torch::manual_seed(5);
  trained->update(batch());
  torch::manual_seed(5);
  fresh->update(batch());
  EXPECT_TRUE(same(snapshot(*fresh), snapshot(*trained)));
}

TEST_F(CheckpointTest, RestoresTheNormalizersStatistics) {
  auto make_normalized = [](uint64_t seed) {
    torch::manual_seed(seed);
    ActorCriticOptions model = two_action_model(8, 16);
    model.normalize_observations = model.normalize_rewards = true;
    return std::make_unique<Learner>(std::make_shared<ActorCritic>(model), LearnerOptions{},
                                     std::make_shared<LocalCommunicator>());
  };
  auto trained = make_normalized(1);
  trained->update(batch());
  trained->update(batch());
  const std::string path = (dir_ / "normalized.pt").string();
  write_checkpoint(path, *trained, progress_at(2), "model.normalize_observations: true\n");
  auto fresh = make_normalized(2);
  read_checkpoint(path, *fresh);
  for (const char* name :
       {"observation_mean", "observation_var", "observation_count", "return_var", "return_count"}) {
    const at::Tensor saved = trained->model().named_parameters()[name];
    EXPECT_TRUE(torch::equal(fresh->model().named_parameters()[name], saved)) << name;
  }
  EXPECT_NEAR(fresh->model().observation_moments().count.item<double>(), 24, 1e-3)
      << "two batches of 12 steps";
}

// A learner-only replay: updates 1..7 on batches that differ per update, under a linear
// learning-rate schedule, without reseeding anywhere. A run checkpointed after update 3
// and resumed in a fresh learner (other initial weights, the RNG disturbed) must reach
// bit-identical parameters at update 7, which needs the parameters, Adam's moments and
// step counts, the update count (the schedule's position; the minibatch order derives
// from it) and the RNG (dropout draws from it) all restored. Resumes that
// lose one of them are shown to end elsewhere, so the equality is not an accident.
std::unique_ptr<Learner> make_scheduled_learner(uint64_t seed) {
  torch::manual_seed(seed);
  LearnerOptions options;
  options.epochs = 2;
  options.minibatches = 2;
  options.lr_schedule = "linear";
  options.planned_updates = 10;
  options.learning_rate = 3e-3;
  ActorCriticOptions model = two_action_model(8, 16);
  model.transformer.dropout = 0.1;  // so that updates draw from the RNG
  return std::make_unique<Learner>(std::make_shared<ActorCritic>(model), options,
                                   std::make_shared<LocalCommunicator>());
}

std::vector<Episode> batch_of_update(int64_t update) {
  return {episode_of_length(2 + update % 4), episode_of_length(5, false, 0.5f * static_cast<float>(update)),
          episode_of_length(3 + update % 3), episode_of_length(4, update % 2 == 0)};
}

void train_updates(Learner& learner, int64_t first, int64_t last) {
  for (int64_t update = first; update <= last; ++update) learner.update(batch_of_update(update));
}

enum class ResumeFlaw { kNone, kRngReseeded, kScheduleRestarted, kMomentsLost };

std::vector<at::Tensor> resumed_run(const std::string& path, ResumeFlaw flaw) {
  auto resumed = make_scheduled_learner(77);
  torch::manual_seed(12345);  // a new process's RNG is anywhere
  read_checkpoint(path, *resumed);
  if (flaw == ResumeFlaw::kRngReseeded) torch::manual_seed(12345);
  if (flaw == ResumeFlaw::kScheduleRestarted) resumed->restore_update_count(0);
  if (flaw == ResumeFlaw::kMomentsLost) resumed->optimizer().state().clear();
  train_updates(*resumed, 4, 7);
  return snapshot(*resumed);
}

TEST_F(CheckpointTest, AResumedRunReplaysTheUninterruptedOneBitForBit) {
  auto uninterrupted = make_scheduled_learner(1);
  train_updates(*uninterrupted, 1, 7);
  const std::vector<at::Tensor> expected = snapshot(*uninterrupted);

  auto interrupted = make_scheduled_learner(1);
  train_updates(*interrupted, 1, 3);
  const std::string path = (dir_ / "update-3.pt").string();
  write_checkpoint(path, *interrupted, progress_at(3), "");
  interrupted.reset();

  EXPECT_TRUE(same(resumed_run(path, ResumeFlaw::kNone), expected));
  EXPECT_FALSE(same(resumed_run(path, ResumeFlaw::kRngReseeded), expected)) << "the replay ignores the RNG";
  EXPECT_FALSE(same(resumed_run(path, ResumeFlaw::kScheduleRestarted), expected))
      << "the replay ignores the update count";
  EXPECT_FALSE(same(resumed_run(path, ResumeFlaw::kMomentsLost), expected))
      << "the replay ignores Adam's moments";
}

TEST_F(CheckpointTest, KeepsTheNewestAndLeavesNoTemporaryFiles) {
  auto learner = make_learner(1);
  CheckpointDirectory directory((dir_ / "checkpoints").string(), 2);
  for (int64_t update : {5, 10, 15}) directory.save(*learner, progress_at(update), "");
  const std::vector<std::string> kept = directory.newest_first();
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(fs::path(kept[0]).filename(), "checkpoint-0000000015.pt");
  EXPECT_EQ(fs::path(kept[1]).filename(), "checkpoint-0000000010.pt");
  for (const auto& item : fs::directory_iterator(dir_ / "checkpoints")) {
    EXPECT_EQ(item.path().extension(), ".pt") << item.path();
  }
}

TEST_F(CheckpointTest, AFlippedByteIsCaughtNamingTheFileAndTheLearnerIsUnchanged) {
  auto trained = make_learner(1);
  trained->update(batch());
  const std::string path = (dir_ / "a.pt").string();
  write_checkpoint(path, *trained, progress_at(1), "");
  // Flip one bit at 40 places spread over the file.
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto fresh = make_learner(2);
  const auto before = snapshot(*fresh);
  const auto saved = snapshot(*trained);
  int caught = 0;
  for (size_t position = 0; position < bytes.size(); position += bytes.size() / 40) {
    std::string corrupt = bytes;
    corrupt[position] = static_cast<char>(corrupt[position] ^ 0x20);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << corrupt;
    try {
      read_checkpoint(path, *fresh);
      // Some bytes (zip headers' spare fields) change nothing that is read: then what
      // loaded is exactly what was saved. Put the fresh weights back for the next try.
      EXPECT_TRUE(same(snapshot(*fresh), saved))
          << "a flip at byte " << position << " loaded different weights";
      torch::NoGradGuard no_grad;
      auto parameters = fresh->model().parameters();
      for (size_t i = 0; i < parameters.size(); ++i) parameters[i].copy_(before[i]);
    } catch (const MalformedInputError& error) {
      ++caught;
      EXPECT_NE(std::string(error.what()).find("checkpoint '" + path + "'"), std::string::npos)
          << error.what();
      EXPECT_TRUE(same(snapshot(*fresh), before))
          << "a failed load changed the learner (byte " << position << ")";
    }
  }
  EXPECT_GT(caught, 30);
}

TEST_F(CheckpointTest, ResumeFallsBackToThePreviousValidCheckpointAndSaysSo) {
  auto trained = make_learner(1);
  CheckpointDirectory directory((dir_ / "checkpoints").string(), 3);
  trained->update(batch());
  directory.save(*trained, progress_at(1), "");
  const auto at_one = snapshot(*trained);
  trained->update(batch());
  const std::string newest = directory.save(*trained, progress_at(2), "");
  fs::resize_file(newest, fs::file_size(newest) / 2);  // a write cut short by a crash

  auto fresh = make_learner(2);
  const auto [path, contents] = directory.restore_newest(*fresh, *logger_, {});
  EXPECT_EQ(fs::path(path).filename(), "checkpoint-0000000001.pt");
  EXPECT_EQ(contents.progress.updates, 1);
  EXPECT_TRUE(same(snapshot(*fresh), at_one));
  EXPECT_NE(log().find("skipping checkpoint '" + newest + "'"), std::string::npos) << log();
  EXPECT_NE(log().find("resuming from an older checkpoint"), std::string::npos) << log();

  fs::resize_file(path, 10);
  try {
    directory.restore_newest(*fresh, *logger_, {});
    FAIL() << "no checkpoint is usable";
  } catch (const MalformedInputError& error) {
    EXPECT_NE(std::string(error.what()).find("no usable checkpoint"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find(newest), std::string::npos) << error.what();
  }
}

TEST_F(CheckpointTest, RejectsAnotherModelAConfigCheckAndAnotherFormatVersion) {
  auto trained = make_learner(1);
  const std::string path = (dir_ / "a.pt").string();
  write_checkpoint(path, *trained, progress_at(1), "model.hidden_size: 8\n");

  LearnerOptions options;
  Learner wider(std::make_shared<ActorCritic>(two_action_model(16, 16)), options,
                std::make_shared<LocalCommunicator>());
  try {
    read_checkpoint(path, wider);
    FAIL() << "a checkpoint of a narrower model loaded";
  } catch (const MalformedInputError& error) {
    EXPECT_NE(std::string(error.what()).find("shape"), std::string::npos) << error.what();
  }

  auto same_shape = make_learner(2);
  try {
    read_checkpoint(path, *same_shape,
                    [](const std::string&) { throw InvalidArgumentError("env.name differs"); });
    FAIL() << "the config check was ignored";
  } catch (const MalformedInputError& error) {
    EXPECT_NE(std::string(error.what()).find("incompatible: env.name differs"), std::string::npos)
        << error.what();
  }

  auto root = read_torch_file(path).toGenericDict();
  root.insert_or_assign("format_version", int64_t{99});
  write_torch_file(path, root);
  try {
    read_checkpoint(path, *same_shape);
    FAIL() << "format version 99 loaded";
  } catch (const MalformedInputError& error) {
    EXPECT_NE(std::string(error.what()).find("format version 99 is not supported"), std::string::npos)
        << error.what();
  }
}

TEST(LearnerNonFinite, ANanLossSkipsTheWholeUpdateAndTheNextOneApplies) {
  auto learner = make_learner(1);
  learner->update(batch());  // the optimizer has state now
  const auto before = snapshot(*learner);
  learner->inject_nonfinite_loss_next_update();
  const UpdateStats skipped = learner->update(batch());
  EXPECT_TRUE(skipped.skipped);
  EXPECT_TRUE(same(snapshot(*learner), before));
  for (const auto& p : learner->model().parameters()) EXPECT_TRUE(p.isfinite().all().item<bool>());
  const UpdateStats applied = learner->update(batch());
  EXPECT_FALSE(applied.skipped);
  EXPECT_FALSE(same(snapshot(*learner), before));
}

}  // namespace
}  // namespace kvrl

namespace kvrl {
namespace {

// Runs where a GPU is usable, or on the CPU in a rehearsal (tests/device_under_test.h).
TEST(LearnerOnGpu, AnUpdateOnTheGpuMatchesTheCpu_CUDA) {
  for (const std::string algorithm : {"ppo", "vtrace"}) {
    LearnerOptions options;
    options.algorithm = algorithm;
    options.epochs = 2;
    options.minibatches = 2;
    torch::manual_seed(11);
    auto cpu_model = std::make_shared<ActorCritic>(two_action_model(8, 16));
    torch::manual_seed(11);
    auto gpu_model = std::make_shared<ActorCritic>(two_action_model(8, 16));
    gpu_model->to(test_support::device_under_test());
    Learner cpu(cpu_model, options, std::make_shared<LocalCommunicator>());
    Learner gpu(gpu_model, options, std::make_shared<LocalCommunicator>());
    EXPECT_EQ(gpu.device(), test_support::device_under_test());
    const UpdateStats on_cpu = cpu.update(batch());
    const UpdateStats on_gpu = gpu.update(batch());
    EXPECT_NEAR(on_gpu.policy_loss, on_cpu.policy_loss, 1e-4) << algorithm;
    EXPECT_NEAR(on_gpu.value_loss, on_cpu.value_loss, 1e-4) << algorithm;
    const auto a = cpu.model().parameters();
    const auto b = gpu.model().parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::allclose(b[i].cpu(), a[i], 1e-4, 1e-5)) << algorithm << " parameter " << i;
    }
  }
}

}  // namespace
}  // namespace kvrl
