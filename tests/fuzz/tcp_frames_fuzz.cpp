// libFuzzer target for what learner 0 reads from a remote actor's socket before trusting
// it (common/comm/tcp_frames.h): the byte stream, split at an input-chosen point, goes
// through TcpFrameReader, and each hello frame's payload through TcpHello::decode. The
// reader may only return frames no larger than its limit, or throw MalformedMessageError;
// a decoded hello must encode back to the same bytes. Anything else (a crash, a sanitizer
// report, another exception, an oversized frame, more bytes held than one frame and the piece just fed) is a
// finding.
#include <cstdint>
#include <span>
#include <vector>

#include "common/comm/tcp_frames.h"
#include "common/support/errors.h"

namespace {

constexpr size_t kLimit = 512;

void check_frame(const kvrl::TcpFrame& frame) {
  if (frame.payload.size() > kLimit) __builtin_trap();
  if (frame.kind != static_cast<uint8_t>(kvrl::HandshakeKind::kHello)) return;
  try {
    if (kvrl::TcpHello::decode(frame.payload).encode() != frame.payload) __builtin_trap();
  } catch (const kvrl::MalformedMessageError&) {
    // the expected way to refuse a hello
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t split = data[0] % size;
  const std::span<const uint8_t> stream(data + 1, size - 1);
  kvrl::TcpFrameReader reader(kLimit);
  try {
    for (const std::span<const uint8_t> piece :
         {stream.first(std::min(split, stream.size())), stream.subspan(std::min(split, stream.size()))}) {
      reader.feed(piece);
      while (std::optional<kvrl::TcpFrame> frame = reader.next()) check_frame(*frame);
      // It holds at most one incomplete frame besides the piece just fed.
      if (reader.held_bytes() > kLimit + kvrl::kTcpFrameHeaderBytes + piece.size()) __builtin_trap();
    }
  } catch (const kvrl::MalformedMessageError&) {
    // the expected way to refuse a stream
  }
  return 0;
}
