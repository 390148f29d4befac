#include "learner/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "common/support/errors.h"
#include "common/wire/crc32.h"

namespace kvrl {
namespace {

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

// Protocol-buffer wire encoding of the few field kinds an Event needs.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void put_tag(std::string& out, int field, int wire_type) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}
template <typename T>
void put_fixed(std::string& out, int field, T value) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  put_tag(out, field, sizeof(T) == 8 ? 1 : 5);
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // little-endian, as the wire format
  out.append(bytes, sizeof(T));
}
void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_tag(out, field, 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
// Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
std::string event(double wall_time, int64_t step) {
  std::string out;
  put_fixed(out, 1, wall_time);
  put_tag(out, 2, 0);
  put_varint(out, static_cast<uint64_t>(step));
  return out;
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::filesystem::create_directories(dir);
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  const double seconds = std::chrono::duration<double>(now).count();
  path_ =
      (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(seconds)) +
                                     "." + host + "." + std::to_string(getpid())))
          .string();
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw Error("cannot write TensorBoard events to '" + path_ + "'");
  std::string first = event(seconds, 0);
  put_bytes(first, 3, "brain.Event:2");
  write_record(first);
}

void TensorBoardWriter::write_scalars(int64_t step, double wall_time,
                                      const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string entry;
    put_bytes(entry, 1, tag);
    put_fixed(entry, 2, static_cast<float>(value));
    put_bytes(summary, 1, entry);
  }
  std::string record = event(wall_time, step);
  put_bytes(record, 5, summary);
  write_record(record);
}

void TensorBoardWriter::write_record(const std::string& payload) {
  const uint64_t length = payload.size();
  const uint32_t length_crc = masked_crc32c(&length, sizeof(length));
  const uint32_t payload_crc = masked_crc32c(payload.data(), payload.size());
  out_.write(reinterpret_cast<const char*>(&length), sizeof(length));
  out_.write(reinterpret_cast<const char*>(&length_crc), sizeof(length_crc));
  out_.write(payload.data(), static_cast<std::streamsize>(payload.size()));
  out_.write(reinterpret_cast<const char*>(&payload_crc), sizeof(payload_crc));
  out_.flush();
  if (!out_) throw Error("cannot write TensorBoard events to '" + path_ + "'");
}

}  // namespace kvrl
