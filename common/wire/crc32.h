// CRC-32 (the IEEE polynomial, as zlib and PNG use) for the checksums of messages
// between ranks and of checkpoints, and CRC-32C (Castagnoli, as TFRecord files use) for
// TensorBoard event files. Thread-safe; the tables are built at compile time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvrl {

// Continues `crc` (0 to start) over `size` bytes at `data`.
uint32_t crc32(const void* data, size_t size, uint32_t crc = 0);
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace kvrl
