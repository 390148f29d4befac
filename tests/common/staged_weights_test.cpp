#include "common/comm/staged_weights.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "common/support/errors.h"

namespace kvrl {
namespace {

// Learner 0 and one actor joined through memory: the k-th broadcast the root starts is
// the k-th one the actor joins, and it lands when the test releases it.
struct Wire {
  std::vector<at::Tensor> sent;  // the root's buffers, in order
  size_t released = 0;           // broadcasts that have landed
  bool failing = false;          // the transport reports an error
  int abandoned = 0;
};

class WireEnd : public WeightBroadcastTransport {
 public:
  WireEnd(Wire& wire, bool root) : wire_(wire), root_(root) {}
  std::unique_ptr<PendingBroadcast> join(at::Tensor buffer) override {
    const size_t index = root_ ? wire_.sent.size() : joined_++;
    if (root_) wire_.sent.push_back(buffer);
    return std::make_unique<Pending>(wire_, index, root_ ? at::Tensor() : buffer);
  }
  std::string name() const override { return "test wire"; }

 private:
  struct Pending : PendingBroadcast {
    Pending(Wire& wire, size_t index, at::Tensor into) : wire(wire), index(index), into(std::move(into)) {}
    bool landed() override {
      if (wire.failing) throw Error("test wire: link down");
      if (wire.released <= index) return false;
      if (into.defined()) into.copy_(wire.sent.at(index));
      return true;
    }
    void abandon() override { ++wire.abandoned; }
    Wire& wire;
    size_t index;
    at::Tensor into;
  };
  Wire& wire_;
  bool root_;
  size_t joined_ = 0;
};

std::vector<at::Tensor> parameters_filled_with(float value) {
  return {torch::full({2, 3}, value), torch::full({4}, value)};
}

constexpr int64_t kParameterCount = 10;

class StagedWeights : public ::testing::Test {
 protected:
  Wire wire;
  WireEnd root{wire, true};
  WireEnd actor_end{wire, false};
  StagedWeightSender sender{root, /*timeout_s=*/60};
  StagedWeightReceiver receiver{actor_end, kParameterCount, torch::TensorOptions(), /*timeout_s=*/60};
  std::vector<at::Tensor> acting = parameters_filled_with(0);

  void publish(float value, int64_t version) {
    receiver.announce({version, kParameterCount});
    sender.start(parameters_filled_with(value), version);
  }
};

TEST_F(StagedWeights, AnnouncedBroadcastIsSwappedInOnlyOnceItHasLanded) {
  publish(1.5f, 1);
  EXPECT_EQ(receiver.poll(acting, 0), std::nullopt);  // joined, still in flight
  EXPECT_EQ(receiver.poll(acting, 0), std::nullopt);
  EXPECT_EQ(acting[0].sum().item<float>(), 0.0f) << "a broadcast in flight must not touch the parameters";
  EXPECT_EQ(receiver.outstanding(), 1u);
  wire.released = 1;
  EXPECT_EQ(receiver.poll(acting, 0), std::optional<int64_t>(1));
  EXPECT_TRUE(torch::equal(acting[0], torch::full({2, 3}, 1.5f)));
  EXPECT_TRUE(torch::equal(acting[1], torch::full({4}, 1.5f)));
  EXPECT_EQ(receiver.outstanding(), 0u);
  sender.finish();
  EXPECT_EQ(sender.in_flight(), 0u);
}

TEST_F(StagedWeights, BroadcastsAreJoinedInOrderAndStaleOnesOnlyReleased) {
  publish(1, 1);
  publish(2, 2);
  publish(3, 3);
  wire.released = 3;
  EXPECT_EQ(receiver.poll(acting, 0), std::optional<int64_t>(1));
  EXPECT_EQ(acting[1][0].item<float>(), 1.0f);
  EXPECT_EQ(receiver.poll(acting, 1), std::optional<int64_t>(2));
  EXPECT_EQ(acting[1][0].item<float>(), 2.0f);
  // An actor already acting with version 5 (e.g. restored) joins version 3 but keeps its weights.
  EXPECT_EQ(receiver.poll(acting, 5), std::nullopt);
  EXPECT_EQ(acting[1][0].item<float>(), 2.0f);
  EXPECT_EQ(receiver.outstanding(), 0u);
}

TEST_F(StagedWeights, ABroadcastCarryingAnotherVersionThanAnnouncedIsRefused) {
  receiver.announce({3, kParameterCount});
  sender.start(parameters_filled_with(7), 4);
  wire.released = 1;
  try {
    receiver.poll(acting, 0);
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("announced as policy version 3 carried version 4"),
              std::string::npos)
        << error.what();
  }
  EXPECT_EQ(acting[0].sum().item<float>(), 0.0f);
}

TEST_F(StagedWeights, ReceiverTimesOutNamingTheVersionAndAbandonsTheBroadcast) {
  StagedWeightReceiver impatient(actor_end, kParameterCount, torch::TensorOptions(), /*timeout_s=*/0.01);
  impatient.announce({1, kParameterCount});
  EXPECT_EQ(impatient.poll(acting, 0), std::nullopt);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  try {
    impatient.poll(acting, 0);
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("policy version 1 had not landed"), std::string::npos)
        << error.what();
  }
  EXPECT_EQ(wire.abandoned, 1);
}

TEST_F(StagedWeights, SenderTimesOutWhenAnActorNeverJoins) {
  StagedWeightSender impatient(root, /*timeout_s=*/0.01);
  impatient.start(parameters_filled_with(1), 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  try {
    impatient.start(parameters_filled_with(2), 2);
    FAIL() << "expected an Error";
  } catch (const Error& error) {
    EXPECT_NE(
        std::string(error.what()).find("policy version 1 from learner rank 0 had not reached every actor"),
        std::string::npos)
        << error.what();
  }
  EXPECT_EQ(wire.abandoned, 1);
}

TEST_F(StagedWeights, TransportErrorsReachTheCaller) {
  publish(1, 1);
  EXPECT_EQ(receiver.poll(acting, 0), std::nullopt);
  wire.failing = true;
  EXPECT_THROW(receiver.poll(acting, 0), Error);
  EXPECT_EQ(acting[0].sum().item<float>(), 0.0f);
}

TEST_F(StagedWeights, AnnouncementsOfAnotherModelOrAnOlderVersionAreRefused) {
  EXPECT_THROW(receiver.announce({1, kParameterCount + 1}), MalformedMessageError);
  receiver.announce({2, kParameterCount});
  EXPECT_THROW(receiver.announce({2, kParameterCount}), MalformedMessageError);
  EXPECT_THROW(receiver.announce({1, kParameterCount}), MalformedMessageError);
  EXPECT_EQ(receiver.outstanding(), 1u);
}

TEST(WeightAnnouncement, RoundTripsAndRejectsBadMessages) {
  const WeightAnnouncement announcement{41, 12345};
  const WeightAnnouncement back = WeightAnnouncement::decode(announcement.encode());
  EXPECT_EQ(back.policy_version, 41);
  EXPECT_EQ(back.parameter_count, 12345);
  std::vector<uint8_t> bytes = announcement.encode();
  bytes.pop_back();
  EXPECT_THROW(WeightAnnouncement::decode(bytes), MalformedMessageError);
  EXPECT_THROW(WeightAnnouncement::decode(WeightAnnouncement{-1, 5}.encode()), MalformedMessageError);
  EXPECT_THROW(WeightAnnouncement::decode(WeightAnnouncement{1, 0}.encode()), MalformedMessageError);
}

TEST(WeightsWithVersion, CarriesTheParametersThenTheVersion) {
  const int64_t version = (int64_t{1} << 40) + 3;  // more than a float's 24-bit mantissa holds
  const at::Tensor flat = weights_with_version(parameters_filled_with(2), version);
  EXPECT_EQ(flat.numel(), kParameterCount + 2);
  EXPECT_EQ(flat.narrow(0, 0, kParameterCount).sum().item<float>(), 2.0f * kParameterCount);
  EXPECT_EQ(version_of_weights(flat), version);
  EXPECT_THROW(version_of_weights(torch::zeros({1})), InvalidArgumentError);
  EXPECT_THROW(weights_with_version({}, 1), InvalidArgumentError);
}

}  // namespace
}  // namespace kvrl
