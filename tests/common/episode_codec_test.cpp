#include "common/wire/episode_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <random>

#include "common/support/errors.h"
#include "common/wire/crc32.h"
#include "tests/common/sample_episode.h"

namespace kvrl {
namespace {

using Reason = MalformedMessageError::Reason;

class EpisodeCodecTest : public ::testing::Test {
 protected:
  void SetUp() override { rng_.seed(42); }

  Episode make_episode(int64_t length, bool truncated = false) {
    return fixtures::sample_episode(length, truncated, rng_);
  }

  static Reason reason_of(const EpisodeCodec& codec, std::span<const uint8_t> message) {
    try {
      codec.decode(message);
    } catch (const MalformedMessageError& error) {
      return error.reason();
    }
    ADD_FAILURE() << "the message decoded";
    return Reason::kContent;
  }

  std::mt19937 rng_;
  EpisodeCodec codec_{{/*observation_size=*/4, /*action_size=*/1, /*max_length=*/500}};
};

TEST(Crc32, MatchesTheStandardCheckValue) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("56789", 5, crc32("1234", 4)), 0xCBF43926u);
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);  // the Castagnoli check value (TFRecord)
  EXPECT_EQ(crc32c("56789", 5, crc32c("1234", 4)), 0xE3069283u);
}

TEST_F(EpisodeCodecTest, RoundTripsEveryField) {
  const Episode e = make_episode(/*length=*/9, /*truncated=*/true);
  const Episode back = codec_.decode(codec_.encode(e));
  EXPECT_EQ(back.actor_rank, 3);
  EXPECT_EQ(back.episode_id, 17u);
  EXPECT_EQ(back.observations, e.observations);
  EXPECT_EQ(back.actions, e.actions);
  EXPECT_EQ(back.rewards, e.rewards);
  EXPECT_EQ(back.terminated, e.terminated);
  EXPECT_EQ(back.truncated, e.truncated);
  EXPECT_EQ(back.is_init, e.is_init);
  EXPECT_EQ(back.behaviour_log_probs, e.behaviour_log_probs);
  EXPECT_EQ(back.values, e.values);
  EXPECT_EQ(back.policy_versions, e.policy_versions);
  EXPECT_EQ(back.final_observation, e.final_observation);
}

TEST_F(EpisodeCodecTest, RejectsTruncatedMessagesAtEveryLength) {
  const auto message = codec_.encode(make_episode(5));
  for (size_t size = 0; size < message.size(); ++size) {
    const Reason reason = reason_of(codec_, std::span(message.data(), size));
    EXPECT_TRUE(reason == Reason::kTruncated || reason == Reason::kChecksum) << size;
  }
}

TEST_F(EpisodeCodecTest, RejectsOversizedMessages) {
  auto message = codec_.encode(make_episode(5));
  message.insert(message.end() - 4, 8, 0);
  EXPECT_EQ(reason_of(codec_, message), Reason::kChecksum);
}

TEST_F(EpisodeCodecTest, RejectsEveryBitFlip) {
  const auto message = codec_.encode(make_episode(3));
  for (size_t bit = 0; bit < message.size() * 8; ++bit) {
    auto flipped = message;
    flipped[bit / 8] ^= static_cast<uint8_t>(1u << (bit % 8));
    EXPECT_THROW(codec_.decode(flipped), MalformedMessageError) << "bit " << bit;
  }
}

TEST_F(EpisodeCodecTest, RejectsAnotherSpec) {
  const auto message = codec_.encode(make_episode(5));
  const EpisodeCodec wide({/*observation_size=*/6, /*action_size=*/1, /*max_length=*/500});
  EXPECT_EQ(reason_of(wide, message), Reason::kSpec);
  const EpisodeCodec short_episodes({4, 1, /*max_length=*/4});
  EXPECT_EQ(reason_of(short_episodes, message), Reason::kSpec);
}

TEST_F(EpisodeCodecTest, RejectsBadContentEvenWithAValidChecksum) {
  auto message = codec_.encode(make_episode(5));
  // The reward field starts after the header (56), the field table (176), observations
  // (5 * 4 * 4) and actions (5 * 4): make the first reward NaN and re-seal the message.
  const size_t reward_offset = 56 + 176 + 80 + 20;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(message.data() + reward_offset, &nan, sizeof(nan));
  const uint32_t crc = crc32(message.data(), message.size() - 4);
  std::memcpy(message.data() + message.size() - 4, &crc, sizeof(crc));
  try {
    codec_.decode(message);
    FAIL();
  } catch (const MalformedMessageError& error) {
    EXPECT_EQ(error.reason(), Reason::kContent);
    EXPECT_NE(std::string(error.what()).find("not finite"), std::string::npos);
  }
}

TEST_F(EpisodeCodecTest, AContextRestartInsideAnEpisodeRoundTrips) {
  Episode restarted = make_episode(5);
  restarted.is_init[3] = 1;  // the actor restarted its contexts after new weights here
  EXPECT_EQ(codec_.decode(codec_.encode(restarted)).is_init, restarted.is_init);
}

TEST_F(EpisodeCodecTest, ARunOfWholeEpisodesRefusesOneThatDoesNotEnd) {
  Episode unfinished = make_episode(5);
  unfinished.terminated.back() = 0;
  EXPECT_NO_THROW(codec_.encode(unfinished));  // a fragment, where fragments are shipped
  const EpisodeCodec whole({/*observation_size=*/4, /*action_size=*/1, /*max_length=*/500, /*max_context=*/0,
                            /*streams=*/1, /*segment_steps=*/0, /*whole_episodes=*/true});
  EXPECT_THROW(whole.encode(unfinished), InvalidArgumentError);
  try {
    whole.decode(codec_.encode(unfinished));
    FAIL() << "decoded";
  } catch (const MalformedMessageError& error) {
    EXPECT_EQ(error.reason(), Reason::kContent);
    EXPECT_NE(std::string(error.what()).find("does not end"), std::string::npos) << error.what();
  }
}

TEST_F(EpisodeCodecTest, EncoderRefusesInconsistentEpisodes) {
  Episode both = make_episode(5);
  both.truncated.back() = 1;
  EXPECT_THROW(codec_.encode(both), InvalidArgumentError);
  Episode no_start = make_episode(5);
  no_start.is_init[0] = 0;
  EXPECT_THROW(codec_.encode(no_start), InvalidArgumentError);
  Episode ragged = make_episode(5);
  ragged.values.pop_back();
  EXPECT_THROW(codec_.encode(ragged), InvalidArgumentError);
}

// A fragment of a long episode: it goes on after its last step, starts mid-episode and
// carries the observations its first step's context held.
Episode fragment_of(Episode e, int64_t first_step, int64_t context_length) {
  e.terminated.back() = 0;
  e.truncated.back() = 0;
  e.first_step = first_step;
  e.stream = 2;
  e.return_before = 41.5;
  e.is_init[0] = context_length == 0 && first_step == 0;
  for (int64_t i = 0; i < context_length * e.observation_size; ++i) {
    e.context_observations.push_back(static_cast<float>(i));
  }
  return e;
}

constexpr EpisodeSpec kFragmentSpec{/*observation_size=*/4, /*action_size=*/1, /*max_length=*/64,
                                    /*max_context=*/8, /*streams=*/4};

TEST_F(EpisodeCodecTest, RoundTripsAFragmentWithItsContextPrefix) {
  const EpisodeCodec codec(kFragmentSpec);
  const Episode e = fragment_of(make_episode(6), /*first_step=*/120, /*context_length=*/8);
  const Episode back = codec.decode(codec.encode(e));
  EXPECT_EQ(back.first_step, 120);
  EXPECT_EQ(back.stream, 2);
  EXPECT_EQ(back.return_before, 41.5);
  EXPECT_EQ(back.context_length(), 8);
  EXPECT_EQ(back.context_observations, e.context_observations);
  EXPECT_FALSE(back.ends_episode());
  EXPECT_DOUBLE_EQ(back.episode_return(), 41.5 + 6);
}

std::string fragment_problem_of(const EpisodeCodec& codec, const std::vector<uint8_t>& message) {
  try {
    codec.decode(message);
  } catch (const MalformedMessageError& error) {
    EXPECT_EQ(error.reason(), Reason::kFragment) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "the fragment decoded";
  return "";
}

// Each inconsistency is refused with a reason of its own, counted under "fragment".
TEST_F(EpisodeCodecTest, RefusesInconsistentFragmentsNamingWhatIsWrong) {
  const EpisodeCodec strict(kFragmentSpec);
  EpisodeSpec loose_spec = kFragmentSpec;
  loose_spec.max_context = 100;
  loose_spec.streams = 16;
  const EpisodeCodec loose(loose_spec);
  const Episode good = fragment_of(make_episode(6), /*first_step=*/120, /*context_length=*/8);

  Episode long_prefix = fragment_of(make_episode(6), 120, /*context_length=*/9);
  EXPECT_NE(fragment_problem_of(strict, loose.encode(long_prefix)).find("longer than the policy's reach (8)"),
            std::string::npos);
  Episode other_stream = good;
  other_stream.stream = 7;
  EXPECT_NE(fragment_problem_of(strict, loose.encode(other_stream)).find("unknown stream 7"),
            std::string::npos);

  // A prefix reaching before the episode's first step: rewrite first_step (header bytes
  // 32..39) to 3 and re-seal the checksum.
  auto gap = strict.encode(good);
  const uint64_t first_step = 3;
  std::memcpy(gap.data() + 32, &first_step, sizeof(first_step));
  const uint32_t crc = crc32(gap.data(), gap.size() - 4);
  std::memcpy(gap.data() + gap.size() - 4, &crc, sizeof(crc));
  EXPECT_NE(fragment_problem_of(strict, gap).find("step numbers"), std::string::npos);

  Episode no_context = fragment_of(make_episode(6), 120, /*context_length=*/0);
  EXPECT_THROW(strict.encode(no_context), InvalidArgumentError);
  Episode restart_with_prefix = good;
  restart_with_prefix.is_init[0] = 1;
  EXPECT_THROW(strict.encode(restart_with_prefix), InvalidArgumentError);
}

// The same episode with its observations as image bytes: every value an integer in [0, 255].
Episode as_uint8(const Episode& e) {
  Episode bytes = e;
  auto to_bytes = [](const ObservationValues& values) {
    ObservationValues out(ObservationElement::kUInt8);
    for (size_t i = 0; i < values.size(); ++i) out.push_back(static_cast<float>((i * 37 + 11) % 256));
    return out;
  };
  bytes.observations = to_bytes(e.observations);
  bytes.final_observation = to_bytes(e.final_observation);
  bytes.context_observations = to_bytes(e.context_observations);
  return bytes;
}

TEST_F(EpisodeCodecTest, Uint8ObservationsRoundTripAsOneBytePerValue) {
  EpisodeSpec spec = codec_.spec();
  spec.observation_element = ObservationElement::kUInt8;
  const EpisodeCodec bytes_codec(spec);
  const Episode floats = make_episode(/*length=*/9);
  const Episode images = as_uint8(floats);
  const std::vector<uint8_t> message = bytes_codec.encode(images);
  const Episode back = bytes_codec.decode(message);
  EXPECT_EQ(back.observations.element(), ObservationElement::kUInt8);
  EXPECT_EQ(back.observations, images.observations);
  EXPECT_EQ(back.final_observation, images.final_observation);
  EXPECT_EQ(back.observations[5], images.observations[5]);
  // Three bytes saved per observation value: 9 steps and the final observation, 4 values each.
  EXPECT_EQ(codec_.encode(floats).size() - message.size(), 3u * (9 + 1) * 4);
}

TEST_F(EpisodeCodecTest, ObservationElementsMustMatchTheSpec) {
  EpisodeSpec spec = codec_.spec();
  spec.observation_element = ObservationElement::kUInt8;
  const EpisodeCodec bytes_codec(spec);
  const Episode floats = make_episode(4);
  // A float32 message under a uint8 spec, and the other way round, are refused by dtype.
  EXPECT_EQ(reason_of(bytes_codec, codec_.encode(floats)), Reason::kSpec);
  EXPECT_EQ(reason_of(codec_, bytes_codec.encode(as_uint8(floats))), Reason::kSpec);
  try {
    bytes_codec.encode(floats);
    FAIL();
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("observations are float32, the spec's are uint8"),
              std::string::npos)
        << error.what();
  }
}

TEST(ObservationValues, Uint8HoldsOnlyIntegersInTheByteRange) {
  ObservationValues values(ObservationElement::kUInt8);
  values.append({0.0f, 17.0f, 255.0f});
  EXPECT_EQ(values.to_floats(), (std::vector<float>{0.0f, 17.0f, 255.0f}));
  EXPECT_EQ(values.byte_size(), 3u);
  for (float bad : {256.0f, -1.0f, 0.5f, std::numeric_limits<float>::quiet_NaN()}) {
    try {
      values.append({1.0f, bad});
      FAIL() << bad;
    } catch (const InvalidArgumentError& error) {
      EXPECT_NE(std::string(error.what()).find("expected an integer in [0, 255]"), std::string::npos);
    }
    EXPECT_EQ(values.size(), 3u) << "a refused step leaves nothing behind";
  }
  EXPECT_THROW(static_cast<void>(values.floats()), InvalidArgumentError);
}

}  // namespace
}  // namespace kvrl
