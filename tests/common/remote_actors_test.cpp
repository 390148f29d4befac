// Elastic actors' transport: TCP frames, learner 0's RemoteActorServer and a remote
// actor's TcpActorTransport, over loopback in one process.
#include <gtest/gtest.h>

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
// clang-format off
#include <utility>
// clang-format on
#include <boost/asio.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/comm/remote_actor_server.h"
#include "common/comm/tcp_actor_transport.h"
#include "common/comm/tcp_frames.h"
#include "common/support/errors.h"
#include "common/support/logger.h"

namespace kvrl {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

constexpr uint64_t kConfigHash = 0x1234abcd5678ef90ULL;
constexpr size_t kFrameLimit = 1 << 20;

std::vector<uint8_t> bytes_of(const std::string& text) { return {text.begin(), text.end()}; }

TEST(TcpFrames, ReassembleFromPiecesOfAnySize) {
  std::vector<uint8_t> stream = encode_tcp_frame(static_cast<uint8_t>(MessageTag::kEpisode), bytes_of("abc"));
  const std::vector<uint8_t> second = encode_tcp_frame(static_cast<uint8_t>(MessageTag::kCredit), {});
  stream.insert(stream.end(), second.begin(), second.end());
  TcpFrameReader reader(kFrameLimit);
  std::vector<TcpFrame> frames;
  for (const uint8_t byte : stream) {
    reader.feed(std::span<const uint8_t>(&byte, 1));
    while (std::optional<TcpFrame> frame = reader.next()) frames.push_back(std::move(*frame));
  }
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].kind, static_cast<uint8_t>(MessageTag::kEpisode));
  EXPECT_EQ(frames[0].payload, bytes_of("abc"));
  EXPECT_TRUE(frames[1].payload.empty());
  EXPECT_EQ(reader.partial_bytes(), 0u);
}

void expect_header_refused(std::vector<uint8_t> frame, const std::string& message) {
  TcpFrameReader reader(kFrameLimit);
  try {
    reader.feed(frame);
    reader.next();
    FAIL() << "expected MalformedMessageError: " << message;
  } catch (const MalformedMessageError& error) {
    EXPECT_EQ(error.reason(), MalformedMessageError::Reason::kHeader);
    EXPECT_EQ(error.what(), "TCP frame: " + message);
  }
}

TEST(TcpFrames, BadHeadersAreRefusedBeforeAnyPayloadIsHeld) {
  const std::vector<uint8_t> good =
      encode_tcp_frame(static_cast<uint8_t>(MessageTag::kEpisode), bytes_of("x"));
  std::vector<uint8_t> frame = good;
  frame[0] = 'G';
  expect_header_refused(frame, "bad magic (not a kvrl actor connection)");
  frame = good;
  frame[4] = 9;
  expect_header_refused(frame, "frame version 9, this build speaks 1");
  frame = good;
  frame[5] = 200;
  expect_header_refused(frame, "unknown frame kind 200");
  frame = good;
  frame[7] = 1;
  expect_header_refused(frame, "reserved bytes are not zero");
  // A huge length prefix: refused from the header alone, nothing buffered for it.
  frame = std::vector<uint8_t>(good.begin(), good.begin() + kTcpFrameHeaderBytes);
  frame[8] = frame[9] = frame[10] = frame[11] = 0xff;
  expect_header_refused(frame, "a payload of 4294967295 bytes is over the limit of 1048576");
}

// A frame whose successor's header is bad still comes out; the bad header fails the next call.
TEST(TcpFrames, AGoodFrameIsNotLostToTheBadHeaderAfterIt) {
  std::vector<uint8_t> stream = encode_tcp_frame(static_cast<uint8_t>(MessageTag::kStop), bytes_of("s"));
  const std::vector<uint8_t> garbage(kTcpFrameHeaderBytes, 'x');
  stream.insert(stream.end(), garbage.begin(), garbage.end());
  TcpFrameReader reader(kFrameLimit);
  try {
    reader.feed(stream);
  } catch (const MalformedMessageError&) {
    FAIL() << "the first frame's header is good";
  }
  std::optional<TcpFrame> first = reader.next();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->kind, static_cast<uint8_t>(MessageTag::kStop));
  EXPECT_THROW(reader.next(), MalformedMessageError);
}

// However the stream is cut, the reader holds at most one frame and the bytes just fed.
TEST(TcpFrames, TheBufferDoesNotGrowWithTheStream) {
  const std::vector<uint8_t> frame =
      encode_tcp_frame(static_cast<uint8_t>(MessageTag::kEpisode), std::vector<uint8_t>(100, 7));
  TcpFrameReader reader(kFrameLimit);
  for (int i = 0; i < 1000; ++i) {
    std::vector<uint8_t> piece(frame.begin() + 1, frame.end());  // the rest of one frame...
    if (i == 0) piece.insert(piece.begin(), frame.front());
    piece.push_back(frame.front());  // ...and the first byte of the next
    reader.feed(piece);
    while (reader.next()) {
    }
    ASSERT_LE(reader.held_bytes(), frame.size() + 1) << "after " << i << " frames";
  }
}

TEST(TcpFrames, HelloRoundTripsAndRefusesBadTokenLengths) {
  const TcpHello hello{kTcpFrameVersion, kConfigHash, "secret"};
  const TcpHello back = TcpHello::decode(hello.encode());
  EXPECT_EQ(back.wire_version, hello.wire_version);
  EXPECT_EQ(back.config_hash, kConfigHash);
  EXPECT_EQ(back.token, "secret");
  std::vector<uint8_t> bytes = hello.encode();
  bytes.pop_back();
  EXPECT_THROW(TcpHello::decode(bytes), MalformedMessageError);
  EXPECT_THROW(TcpHello::decode(std::vector<uint8_t>(5, 0)), MalformedMessageError);
}

class RemoteActorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RemoteActorServerOptions options;
    options.token = "secret";
    options.config_hash = kConfigHash;
    options.first_actor_id = 3;
    options.max_connections = 2;
    options.max_frame_bytes = kFrameLimit;
    options.max_queued_bytes = 4 * kFrameLimit;
    options.handshake_timeout_s = 2;
    server_ = std::make_unique<RemoteActorServer>(options, std::make_shared<Logger>(0, "test", "", "off"));
  }

  std::unique_ptr<TcpActorTransport> connect(const std::string& token = "secret",
                                             uint64_t hash = kConfigHash) {
    return std::make_unique<TcpActorTransport>("127.0.0.1", server_->port(),
                                               TcpHello{kTcpFrameVersion, hash, token}, 5s, kFrameLimit);
  }

  // The next message the server hands out, waiting up to 5 s.
  Message next_at_server() {
    for (int i = 0; i < 500; ++i) {
      if (std::optional<Message> message = server_->poll()) return *message;
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "no message at the server";
    return {};
  }

  static Message next_at(TcpActorTransport& actor) {
    for (int i = 0; i < 500; ++i) {
      if (std::optional<Message> message = actor.poll()) return *message;
      std::this_thread::sleep_for(10ms);
    }
    ADD_FAILURE() << "no message at the actor";
    return {};
  }

  // The server's counter `name` once it reached `expected`, or after 2 s.
  int64_t counter(const std::string& name, int64_t expected) {
    int64_t value = 0;
    for (int i = 0; i < 200 && value != expected; ++i) {
      const auto counters = server_->counters();
      value = counters.count(name) > 0 ? counters.at(name) : 0;
      if (value != expected) std::this_thread::sleep_for(10ms);
    }
    return value;
  }

  std::unique_ptr<RemoteActorServer> server_;
};

TEST_F(RemoteActorsTest, AnActorJoinsAndMessagesFlowBothWays) {
  auto actor = connect();
  EXPECT_EQ(actor->rank(), 3);
  Message joined = next_at_server();
  EXPECT_EQ(joined.tag, MessageTag::kActorJoined);
  EXPECT_EQ(joined.source, 3);
  actor->send(0, MessageTag::kEpisode, bytes_of("episode bytes"));
  actor->flush();
  Message episode = next_at_server();
  EXPECT_EQ(episode.tag, MessageTag::kEpisode);
  EXPECT_EQ(episode.source, 3);
  EXPECT_EQ(episode.bytes, bytes_of("episode bytes"));
  server_->send(3, MessageTag::kWeights, bytes_of("weights"));
  Message weights = next_at(*actor);
  EXPECT_EQ(weights.tag, MessageTag::kWeights);
  EXPECT_EQ(weights.source, 0);
  EXPECT_EQ(weights.bytes, bytes_of("weights"));
  EXPECT_EQ(server_->connected(), 1);
  // A second actor gets the next id; ids are never reused.
  auto second = connect();
  EXPECT_EQ(second->rank(), 4);
}

void expect_refused(const std::function<void()>& connect, const std::string& reason) {
  try {
    connect();
    FAIL() << "expected a refusal: " << reason;
  } catch (const InvalidArgumentError& error) {
    EXPECT_NE(std::string(error.what()).find("refused: " + reason), std::string::npos) << error.what();
  }
}

TEST_F(RemoteActorsTest, WrongTokenConfigOrTooManyActorsAreRefusedWithTheReason) {
  expect_refused([&] { connect("guess"); }, "wrong token");
  expect_refused([&] { connect("secret", kConfigHash + 1); }, "config hash");
  auto first = connect();
  auto second = connect();
  expect_refused([&] { connect(); }, "learner 0 serves at most 2 remote actors");
  EXPECT_EQ(counter("refused_token", 1), 1);
  EXPECT_EQ(counter("refused_config", 1), 1);
  EXPECT_EQ(counter("refused_connections", 1), 1);
  EXPECT_EQ(counter("accepted", 2), 2);
}

// Raw bytes from a client that is not a kvrl actor.
void send_raw(int port, const std::vector<uint8_t>& bytes) {
  asio::io_context io;
  asio::ip::tcp::socket socket(io);
  socket.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  asio::write(socket, asio::buffer(bytes));
  std::this_thread::sleep_for(50ms);
}

TEST_F(RemoteActorsTest, GarbageHugeLengthsAndTruncatedFramesDropOnlyTheirSender) {
  auto actor = connect();
  next_at_server();  // joined
  send_raw(server_->port(), bytes_of("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::vector<uint8_t> huge = encode_tcp_frame(static_cast<uint8_t>(HandshakeKind::kHello), {});
  huge[8] = huge[9] = huge[10] = huge[11] = 0xff;
  send_raw(server_->port(), huge);
  std::vector<uint8_t> truncated =
      encode_tcp_frame(static_cast<uint8_t>(HandshakeKind::kHello),
                       TcpHello{kTcpFrameVersion, kConfigHash, "secret"}.encode());
  truncated.resize(truncated.size() - 3);
  send_raw(server_->port(), truncated);
  // Before its hello is accepted a peer may announce no more than a hello's bytes.
  std::vector<uint8_t> big_before_hello = encode_tcp_frame(static_cast<uint8_t>(MessageTag::kEpisode), {});
  big_before_hello[9] = 0x10;  // 4096 bytes: under the frame limit, over a hello's
  send_raw(server_->port(), big_before_hello);
  EXPECT_EQ(counter("refused_malformed_frame", 3), 3);
  EXPECT_EQ(counter("refused_truncated_frame", 1), 1);
  // The actor that was there goes on as before.
  actor->send(0, MessageTag::kEpisode, bytes_of("still here"));
  EXPECT_EQ(next_at_server().bytes, bytes_of("still here"));
  EXPECT_EQ(server_->connected(), 1);
}

TEST_F(RemoteActorsTest, AnActorThatVanishesIsReportedAsLeftAndSendsToItAreDropped) {
  auto actor = connect();
  next_at_server();  // joined
  actor.reset();
  const Message left = next_at_server();
  EXPECT_EQ(left.tag, MessageTag::kActorLeft);
  EXPECT_EQ(left.source, 3);
  EXPECT_EQ(std::string(left.bytes.begin(), left.bytes.end()), "closed");
  server_->send(3, MessageTag::kCredit, {});
  EXPECT_EQ(counter("sends_dropped", 1), 1);
  EXPECT_EQ(server_->connected(), 0);
}

// The learner's end after every remote actor already left: the server shuts down at
// once (it once waited forever for an I/O thread that had run out of work).
TEST_F(RemoteActorsTest, ShutsDownAfterEveryActorLeft) {
  auto actor = connect();
  next_at_server();  // joined
  actor.reset();
  EXPECT_EQ(next_at_server().tag, MessageTag::kActorLeft);
  const auto begin = std::chrono::steady_clock::now();
  server_.reset();
  EXPECT_LT(std::chrono::steady_clock::now() - begin, 1s);
}

TEST_F(RemoteActorsTest, AnActorWhoseLearnerGoesAwayIsToldToStop) {
  auto actor = connect();
  next_at_server();
  server_.reset();
  const Message stop = next_at(*actor);
  EXPECT_EQ(stop.tag, MessageTag::kStop);
  ASSERT_EQ(stop.bytes.size(), 1u);
  EXPECT_EQ(stop.bytes[0], static_cast<uint8_t>(RunEnd::kInterrupted));
  EXPECT_NE(actor->lost(), "");
  actor->send(0, MessageTag::kActorDone, {});
  actor->flush();  // returns: nobody is listening
}

TEST(RemoteActorAddress, HostAndPortAreParsedOrRefusedNamingTheForm) {
  EXPECT_EQ(parse_host_port("10.0.0.5:29500"), (std::pair<std::string, int>{"10.0.0.5", 29500}));
  EXPECT_EQ(parse_host_port("[::1]:7"), (std::pair<std::string, int>{"::1", 7}));
  for (const std::string bad : {"10.0.0.5", ":80", "host:0", "host:70000", "host:8x"}) {
    EXPECT_THROW(parse_host_port(bad), InvalidArgumentError) << bad;
  }
}

}  // namespace
}  // namespace kvrl
