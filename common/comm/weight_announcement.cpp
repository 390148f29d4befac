#include "common/comm/weight_announcement.h"

#include <cstring>
#include <string>

#include "common/support/errors.h"

namespace kvrl {

std::vector<uint8_t> WeightAnnouncement::encode() const {
  std::vector<uint8_t> bytes(2 * sizeof(int64_t));
  std::memcpy(bytes.data(), &policy_version, sizeof(int64_t));
  std::memcpy(bytes.data() + sizeof(int64_t), &parameter_count, sizeof(int64_t));
  return bytes;
}

WeightAnnouncement WeightAnnouncement::decode(const std::vector<uint8_t>& bytes) {
  if (bytes.size() != 2 * sizeof(int64_t)) {
    throw MalformedMessageError(
        MalformedMessageError::Reason::kTruncated,
        "weights announcement: " + std::to_string(bytes.size()) + " bytes, expected 16");
  }
  WeightAnnouncement announcement;
  std::memcpy(&announcement.policy_version, bytes.data(), sizeof(int64_t));
  std::memcpy(&announcement.parameter_count, bytes.data() + sizeof(int64_t), sizeof(int64_t));
  if (announcement.policy_version < 0 || announcement.parameter_count <= 0) {
    throw MalformedMessageError(MalformedMessageError::Reason::kContent,
                                "weights announcement: policy version " +
                                    std::to_string(announcement.policy_version) + " and parameter count " +
                                    std::to_string(announcement.parameter_count) + " must be >= 0 and > 0");
  }
  return announcement;
}

}  // namespace kvrl
