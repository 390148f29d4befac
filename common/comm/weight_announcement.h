// The MPI message with which learner 0 announces a staged weight broadcast
// (MessageTag::kWeightsAnnounce, common/comm/staged_weights.h): the policy version and the
// parameter count, 16 bytes. No LibTorch, so the fuzz target builds it alone
// (tests/fuzz/weight_announcement_fuzz.cpp).
#pragma once

#include <cstdint>
#include <vector>

namespace kvrl {

struct WeightAnnouncement {
  int64_t policy_version = 0;
  int64_t parameter_count = 0;

  std::vector<uint8_t> encode() const;
  // Throws MalformedMessageError on a message of the wrong size or with a negative field.
  static WeightAnnouncement decode(const std::vector<uint8_t>& bytes);
};

}  // namespace kvrl
