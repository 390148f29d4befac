// Frames on the TCP stream between learner 0 and a remote actor (`kvrl actor --connect`,
// docs/reliability.md "Elastic actors"): a 12-byte header, then the payload.
//
//   bytes 0-3   magic "KVRF"
//   byte  4     frame version (kTcpFrameVersion)
//   byte  5     kind: a MessageTag (episode, credit, weights, stop, done, stop request) or a
//               handshake kind (hello, welcome, refused)
//   bytes 6-7   zero
//   bytes 8-11  payload length, little-endian uint32
//
// Payloads of messages are the existing versioned, checksummed wire formats (episodes,
// weights); the frame adds no checksum of its own. A reader refuses, by
// MalformedMessageError, a wrong magic or version, nonzero reserved bytes, an unknown kind
// or a length above its limit, before buffering any of the payload; a server's limit is a
// hello's size until the peer is let in, so a garbage or hostile peer costs at most a
// hello's bytes before it is dropped.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/comm/transport.h"

namespace kvrl {

inline constexpr uint8_t kTcpFrameVersion = 1;
inline constexpr size_t kTcpFrameHeaderBytes = 12;

// The kinds a frame may carry besides the MessageTags of Transport.
enum class HandshakeKind : uint8_t {
  kHello = 64,    // actor -> learner 0: wire version, config hash, token
  kWelcome = 65,  // learner 0 -> actor: the actor id assigned to it
  kRefused = 66,  // learner 0 -> actor: why the connection is refused (text); then closed
};

struct TcpFrame {
  uint8_t kind = 0;  // a MessageTag or a HandshakeKind
  std::vector<uint8_t> payload;
};

// The bytes of one frame.
std::vector<uint8_t> encode_tcp_frame(uint8_t kind, std::span<const uint8_t> payload);

// Reassembles frames from a byte stream that arrives in pieces of any size.
class TcpFrameReader {
 public:
  explicit TcpFrameReader(size_t max_payload_bytes) : max_payload_bytes_(max_payload_bytes) {}
  // Appends received bytes. Throws MalformedMessageError (kHeader) as soon as a header is
  // wrong or announces a payload above the limit.
  void feed(std::span<const uint8_t> bytes);
  // The next complete frame, or nothing until more bytes arrive.
  std::optional<TcpFrame> next();
  // Bytes held of a frame not yet complete (what a peer that vanished mid-frame leaves).
  size_t partial_bytes() const { return buffer_.size() - consumed_; }
  // Bytes the reader holds in memory, read out or not.
  size_t held_bytes() const { return buffer_.size(); }
  // Changes the payload limit for the frames still to come (a server raises it from the
  // hello's size once the peer is let in).
  void set_max_payload_bytes(size_t bytes) { max_payload_bytes_ = bytes; }

 private:
  void check_header() const;

  size_t max_payload_bytes_;
  std::vector<uint8_t> buffer_;
  size_t consumed_ = 0;
};

// The hello an actor opens with.
struct TcpHello {
  uint32_t wire_version = 0;  // kTcpFrameVersion and the episode/weights formats the actor speaks
  uint64_t config_hash = 0;   // of the config keys that define the model and environment
  std::string token;          // the shared secret from the token file
  std::vector<uint8_t> encode() const;
  // Throws MalformedMessageError naming what is wrong.
  static TcpHello decode(std::span<const uint8_t> bytes);
};

// The largest hello: what a server's reader accepts before it lets a peer in.
inline constexpr size_t kMaxHelloBytes = 16 + 1024;

// Learner 0's welcome: the id the actor acts as (its rank in episodes, above every MPI rank).
std::vector<uint8_t> encode_welcome(int32_t actor_id);
int32_t decode_welcome(std::span<const uint8_t> bytes);

}  // namespace kvrl
