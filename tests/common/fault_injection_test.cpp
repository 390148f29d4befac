#include "common/support/fault_injection.h"

#include <gtest/gtest.h>

#include "common/support/errors.h"

namespace kvrl {
namespace {

TEST(FaultPlan, TakesOnlyTheEntriesOfItsRank) {
  const std::string spec = "corrupt_episode:1:3,exit:2:40,abort:1:7,kill:3:9,freeze:2:11,nan_loss:0:5:4";
  const FaultPlan actor = FaultPlan::parse(spec, 1);
  EXPECT_EQ(actor.corrupt_episode, 3);
  EXPECT_EQ(actor.abort_at, 7);
  EXPECT_EQ(actor.exit_at, 0);
  const FaultPlan learner = FaultPlan::parse(spec, 0);
  EXPECT_EQ(learner.corrupt_episode, 0);
  EXPECT_FALSE(learner.nan_loss_at(4));
  EXPECT_TRUE(learner.nan_loss_at(5));
  EXPECT_TRUE(learner.nan_loss_at(8));
  EXPECT_FALSE(learner.nan_loss_at(9));
  EXPECT_EQ(FaultPlan::parse(spec, 3).kill_at, 9);
  EXPECT_EQ(FaultPlan::parse(spec, 2).freeze_at, 11);
  EXPECT_EQ(FaultPlan::parse(spec, 3).freeze_at, 0);
  EXPECT_EQ(FaultPlan::parse("", 0).exit_at, 0);
}

TEST(FaultPlan, RejectsMalformedEntriesNamingThem) {
  for (const std::string bad : {"explode:1:3", "exit:1", "exit:1:0", "exit:x:3", "exit:1:3:2",
                                "nan_loss:0:1:0", "exit:-1:3", "exit:1:3junk"}) {
    try {
      FaultPlan::parse(bad, 1);
      FAIL() << bad << " was accepted";
    } catch (const InvalidArgumentError& error) {
      EXPECT_NE(std::string(error.what()).find("KVRL_FAULT entry '" + bad + "'"), std::string::npos)
          << error.what();
      EXPECT_NE(std::string(error.what()).find("KIND:RANK:N[:COUNT]"), std::string::npos) << error.what();
    }
  }
}

}  // namespace
}  // namespace kvrl
