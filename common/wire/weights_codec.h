// The weight message from learner 0 to actors: a header (magic, format version, policy
// version, element count), every parameter's float32 values in the module's parameter
// order, and a CRC-32. An actor applies a message only after it decoded whole, so a
// half-received or corrupt broadcast is never used. Encoding and decoding touch no
// LibTorch (the fuzz target builds them alone); common/comm/parameter_vector.h moves the
// values between a module's parameters and one flat vector.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvrl {

struct WeightsMessage {
  int64_t policy_version = 0;
  std::vector<float> values;  // the parameters flattened in order
};

class WeightsCodec {
 public:
  static constexpr uint32_t kMagic = 0x5457564b;  // "KVWT"
  static constexpr uint16_t kVersion = 1;

  static std::vector<uint8_t> encode(int64_t policy_version, std::span<const float> values);
  // Throws MalformedMessageError unless the message is whole and holds `expected_numel` values.
  static WeightsMessage decode(std::span<const uint8_t> message, int64_t expected_numel);
};

}  // namespace kvrl
