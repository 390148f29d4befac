#include "common/wire/weights_codec.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "common/comm/parameter_vector.h"
#include "common/support/errors.h"

namespace kvrl {
namespace {

using Reason = MalformedMessageError::Reason;

Reason reason_of(std::span<const uint8_t> message, int64_t expected_numel) {
  try {
    WeightsCodec::decode(message, expected_numel);
  } catch (const MalformedMessageError& error) {
    return error.reason();
  }
  ADD_FAILURE() << "the message decoded";
  return Reason::kContent;
}

TEST(WeightsCodec, RoundTripsParametersThroughAFlatVector) {
  std::vector<at::Tensor> parameters = {torch::randn({3, 4}), torch::randn({5})};
  const std::vector<uint8_t> bytes = WeightsCodec::encode(7, flatten_parameters(parameters));
  const WeightsMessage message = WeightsCodec::decode(bytes, 17);
  EXPECT_EQ(message.policy_version, 7);
  std::vector<at::Tensor> target = {torch::zeros({3, 4}), torch::zeros({5})};
  assign_parameters(message.values, target);
  EXPECT_TRUE(torch::equal(target[0], parameters[0]));
  EXPECT_TRUE(torch::equal(target[1], parameters[1]));
  EXPECT_THROW(assign_parameters(std::span<const float>(message.values).first(16), target),
               InvalidArgumentError);
}

TEST(WeightsCodec, RejectsTruncatedFlippedWrongSizeAndNegativeVersion) {
  const std::vector<float> values(10, 0.5f);
  const std::vector<uint8_t> bytes = WeightsCodec::encode(3, values);
  EXPECT_EQ(reason_of(std::span(bytes).first(20), 10), Reason::kTruncated);
  EXPECT_EQ(reason_of(std::span(bytes).first(bytes.size() - 1), 10), Reason::kChecksum);
  for (size_t position : {size_t{0}, size_t{9}, bytes.size() / 2, bytes.size() - 1}) {
    std::vector<uint8_t> flipped = bytes;
    flipped[position] ^= 0x01;
    EXPECT_EQ(reason_of(flipped, 10), Reason::kChecksum) << position;
  }
  EXPECT_EQ(reason_of(bytes, 11), Reason::kSpec);
  EXPECT_EQ(reason_of(WeightsCodec::encode(-1, values), 10), Reason::kContent);
}

}  // namespace
}  // namespace kvrl
