#include "common/wire/weights_codec.h"

#include <cstring>

#include "common/support/errors.h"
#include "common/wire/crc32.h"

namespace kvrl {
namespace {

constexpr size_t kHeaderBytes = 24;
using Reason = MalformedMessageError::Reason;

}  // namespace

std::vector<uint8_t> WeightsCodec::encode(int64_t policy_version, std::span<const float> values) {
  const int64_t numel = static_cast<int64_t>(values.size());
  std::vector<uint8_t> out(kHeaderBytes + values.size() * 4 + 4);
  const uint16_t reserved = 0;
  std::memcpy(out.data(), &kMagic, 4);
  std::memcpy(out.data() + 4, &kVersion, 2);
  std::memcpy(out.data() + 6, &reserved, 2);
  std::memcpy(out.data() + 8, &policy_version, 8);
  std::memcpy(out.data() + 16, &numel, 8);
  if (!values.empty()) std::memcpy(out.data() + kHeaderBytes, values.data(), values.size() * 4);
  const uint32_t crc = crc32(out.data(), out.size() - 4);
  std::memcpy(out.data() + out.size() - 4, &crc, 4);
  return out;
}

WeightsMessage WeightsCodec::decode(std::span<const uint8_t> message, int64_t expected_numel) {
  if (message.size() < kHeaderBytes + 4)
    throw MalformedMessageError(Reason::kTruncated, "weights message too short");
  uint32_t crc = 0;
  std::memcpy(&crc, message.data() + message.size() - 4, 4);
  if (crc != crc32(message.data(), message.size() - 4)) {
    throw MalformedMessageError(Reason::kChecksum, "weights message checksum mismatch");
  }
  uint32_t magic = 0;
  uint16_t version = 0;
  std::memcpy(&magic, message.data(), 4);
  std::memcpy(&version, message.data() + 4, 2);
  if (magic != kMagic || version != kVersion) {
    throw MalformedMessageError(Reason::kHeader,
                                "not a weights message of format version " + std::to_string(kVersion));
  }
  WeightsMessage decoded;
  int64_t numel = 0;
  std::memcpy(&decoded.policy_version, message.data() + 8, 8);
  std::memcpy(&numel, message.data() + 16, 8);
  if (numel != expected_numel || message.size() != kHeaderBytes + static_cast<size_t>(numel) * 4 + 4) {
    throw MalformedMessageError(Reason::kSpec, "weights message holds " + std::to_string(numel) +
                                                   " values, the model has " +
                                                   std::to_string(expected_numel));
  }
  if (decoded.policy_version < 0) throw MalformedMessageError(Reason::kContent, "negative policy version");
  decoded.values.resize(static_cast<size_t>(numel));
  if (numel > 0)
    std::memcpy(decoded.values.data(), message.data() + kHeaderBytes, static_cast<size_t>(numel) * 4);
  return decoded;
}

}  // namespace kvrl
