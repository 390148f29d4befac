#include "common/comm/tcp_frames.h"

#include <cstring>
#include <limits>

#include "common/support/errors.h"

namespace kvrl {
namespace {

constexpr uint8_t kMagic[4] = {'K', 'V', 'R', 'F'};
constexpr size_t kMaxTokenBytes = kMaxHelloBytes - 16;

void put_u32(std::vector<uint8_t>& out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(value >> (8 * i)));
}

uint32_t get_u32(const uint8_t* bytes) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= static_cast<uint32_t>(bytes[i]) << (8 * i);
  return value;
}

bool known_kind(uint8_t kind) {
  const bool message = kind >= static_cast<uint8_t>(MessageTag::kEpisode) &&
                       kind <= static_cast<uint8_t>(MessageTag::kWeightsAnnounce);
  return message || (kind >= static_cast<uint8_t>(HandshakeKind::kHello) &&
                     kind <= static_cast<uint8_t>(HandshakeKind::kRefused));
}

[[noreturn]] void bad_header(const std::string& what) {
  throw MalformedMessageError(MalformedMessageError::Reason::kHeader, "TCP frame: " + what);
}

}  // namespace

std::vector<uint8_t> encode_tcp_frame(uint8_t kind, std::span<const uint8_t> payload) {
  if (payload.size() > std::numeric_limits<uint32_t>::max()) {
    throw InvalidArgumentError("a TCP frame carries at most 4 GiB; this payload has " +
                               std::to_string(payload.size()) + " bytes");
  }
  std::vector<uint8_t> frame(kMagic, kMagic + 4);
  frame.push_back(kTcpFrameVersion);
  frame.push_back(kind);
  frame.push_back(0);
  frame.push_back(0);
  put_u32(frame, static_cast<uint32_t>(payload.size()));
  frame.insert(frame.end(), payload.begin(), payload.end());
  return frame;
}

void TcpFrameReader::feed(std::span<const uint8_t> bytes) {
  // Drop what was read out, so the buffer holds at most one frame and the bytes just fed.
  buffer_.erase(buffer_.begin(), buffer_.begin() + static_cast<std::ptrdiff_t>(consumed_));
  consumed_ = 0;
  buffer_.insert(buffer_.end(), bytes.begin(), bytes.end());
  if (partial_bytes() >= kTcpFrameHeaderBytes) check_header();
}

void TcpFrameReader::check_header() const {
  const uint8_t* header = buffer_.data() + consumed_;
  if (std::memcmp(header, kMagic, 4) != 0) bad_header("bad magic (not a kvrl actor connection)");
  if (header[4] != kTcpFrameVersion) {
    bad_header("frame version " + std::to_string(header[4]) + ", this build speaks " +
               std::to_string(kTcpFrameVersion));
  }
  if (!known_kind(header[5])) bad_header("unknown frame kind " + std::to_string(header[5]));
  if (header[6] != 0 || header[7] != 0) bad_header("reserved bytes are not zero");
  const uint32_t length = get_u32(header + 8);
  if (length > max_payload_bytes_) {
    bad_header("a payload of " + std::to_string(length) + " bytes is over the limit of " +
               std::to_string(max_payload_bytes_));
  }
}

std::optional<TcpFrame> TcpFrameReader::next() {
  if (partial_bytes() < kTcpFrameHeaderBytes) return std::nullopt;
  check_header();
  const uint8_t* header = buffer_.data() + consumed_;
  const uint32_t length = get_u32(header + 8);
  if (partial_bytes() < kTcpFrameHeaderBytes + length) return std::nullopt;
  TcpFrame frame{header[5],
                 std::vector<uint8_t>(header + kTcpFrameHeaderBytes, header + kTcpFrameHeaderBytes + length)};
  consumed_ += kTcpFrameHeaderBytes + length;
  if (consumed_ == buffer_.size()) {
    buffer_.clear();
    consumed_ = 0;
  }
  return frame;  // the next header is checked by the next call, so this frame is not lost
}

std::vector<uint8_t> TcpHello::encode() const {
  std::vector<uint8_t> bytes;
  put_u32(bytes, wire_version);
  put_u32(bytes, static_cast<uint32_t>(config_hash));
  put_u32(bytes, static_cast<uint32_t>(config_hash >> 32));
  put_u32(bytes, static_cast<uint32_t>(token.size()));
  bytes.insert(bytes.end(), token.begin(), token.end());
  return bytes;
}

TcpHello TcpHello::decode(std::span<const uint8_t> bytes) {
  if (bytes.size() < 16) {
    throw MalformedMessageError(MalformedMessageError::Reason::kTruncated,
                                "hello of " + std::to_string(bytes.size()) + " bytes, expected at least 16");
  }
  TcpHello hello;
  hello.wire_version = get_u32(bytes.data());
  hello.config_hash = get_u32(bytes.data() + 4) | (static_cast<uint64_t>(get_u32(bytes.data() + 8)) << 32);
  const uint32_t token_bytes = get_u32(bytes.data() + 12);
  if (token_bytes > kMaxTokenBytes || bytes.size() != 16 + token_bytes) {
    throw MalformedMessageError(MalformedMessageError::Reason::kContent,
                                "hello announces a token of " + std::to_string(token_bytes) + " bytes in " +
                                    std::to_string(bytes.size()) + " (at most " +
                                    std::to_string(kMaxTokenBytes) + ")");
  }
  hello.token.assign(bytes.begin() + 16, bytes.end());
  return hello;
}

std::vector<uint8_t> encode_welcome(int32_t actor_id) {
  std::vector<uint8_t> bytes;
  put_u32(bytes, static_cast<uint32_t>(actor_id));
  return bytes;
}

int32_t decode_welcome(std::span<const uint8_t> bytes) {
  if (bytes.size() != 4) {
    throw MalformedMessageError(MalformedMessageError::Reason::kTruncated,
                                "welcome of " + std::to_string(bytes.size()) + " bytes, expected 4");
  }
  return static_cast<int32_t>(get_u32(bytes.data()));
}

}  // namespace kvrl
