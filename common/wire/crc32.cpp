#include "common/wire/crc32.h"

#include <array>

namespace kvrl {
namespace {

// The byte-at-a-time table of a reflected CRC-32 with polynomial `reflected_polynomial`.
constexpr std::array<uint32_t, 256> make_table(uint32_t reflected_polynomial) {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t value = i;
    for (int bit = 0; bit < 8; ++bit) value = (value & 1) ? reflected_polynomial ^ (value >> 1) : value >> 1;
    table[i] = value;
  }
  return table;
}

constexpr std::array<uint32_t, 256> kIeeeTable = make_table(0xEDB88320u);
constexpr std::array<uint32_t, 256> kCastagnoliTable = make_table(0x82F63B78u);

uint32_t continue_crc(const std::array<uint32_t, 256>& table, const void* data, size_t size, uint32_t crc) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  crc = ~crc;
  for (size_t i = 0; i < size; ++i) crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace

uint32_t crc32(const void* data, size_t size, uint32_t crc) {
  return continue_crc(kIeeeTable, data, size, crc);
}
uint32_t crc32c(const void* data, size_t size, uint32_t crc) {
  return continue_crc(kCastagnoliTable, data, size, crc);
}

}  // namespace kvrl
