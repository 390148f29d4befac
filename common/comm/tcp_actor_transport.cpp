#include "common/comm/tcp_actor_transport.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>, so
// <utility> comes first, out of clang-format's include sorting.
// clang-format off
#include <utility>
// clang-format on
#include <array>
#include <boost/asio.hpp>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "common/comm/tcp_keep_alive.h"
#include "common/support/errors.h"

namespace kvrl {

namespace asio = boost::asio;
using asio::ip::tcp;

struct TcpActorTransport::State {
  asio::io_context io;
  tcp::socket socket{io};
  TcpFrameReader reader;
  std::array<uint8_t, 1 << 16> buffer{};
  std::thread thread;
  int actor_id = -1;
  std::deque<std::vector<uint8_t>> outgoing;  // I/O thread only
  bool writing = false;                       // I/O thread only
  mutable std::mutex mutex;                   // guards what follows
  std::condition_variable sent;
  std::deque<Message> inbox;
  size_t unsent = 0;
  std::string lost;
  bool stop_handed_out = false;
  bool learner_said_stop = false;

  explicit State(size_t max_frame_bytes) : reader(max_frame_bytes) {}

  void connect(const std::string& host, int port, std::chrono::duration<double> timeout);
  // The next frame, reading on this thread; throws Error when none comes within `timeout`.
  TcpFrame read_frame_within(std::chrono::duration<double> timeout);
  void read();
  void write_next();
  void lose(const std::string& why) {
    std::lock_guard lock(mutex);
    if (lost.empty()) lost = why;
    sent.notify_all();
  }
};

void TcpActorTransport::State::connect(const std::string& host, int port,
                                       std::chrono::duration<double> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  tcp::resolver resolver(io);
  boost::system::error_code error;
  while (true) {
    const auto endpoints = resolver.resolve(host, std::to_string(port), error);
    if (!error) asio::connect(socket, endpoints, error);
    if (!error) return;
    if (std::chrono::steady_clock::now() >= deadline) {
      throw Error("cannot connect to learner 0 at " + host + ":" + std::to_string(port) + ": " +
                  error.message() +
                  " (is the training running with remote.port set, and the address reachable?)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

TcpFrame TcpActorTransport::State::read_frame_within(std::chrono::duration<double> timeout) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  while (true) {
    if (std::optional<TcpFrame> frame = reader.next()) return std::move(*frame);
    bool done = false;
    boost::system::error_code error;
    size_t bytes = 0;
    socket.async_read_some(asio::buffer(buffer), [&](const boost::system::error_code& e, size_t n) {
      error = e;
      bytes = n;
      done = true;
    });
    io.restart();
    io.run_until(deadline);
    if (!done) {
      socket.cancel();
      io.restart();
      io.run();  // the cancelled read's handler
      throw Error("learner 0 did not answer the hello within " + std::to_string(timeout.count()) + " s");
    }
    if (error) throw Error("learner 0 closed the connection during the handshake: " + error.message());
    reader.feed(std::span<const uint8_t>(buffer.data(), bytes));
  }
}

void TcpActorTransport::State::read() {
  socket.async_read_some(asio::buffer(buffer), [this](const boost::system::error_code& error, size_t bytes) {
    if (error) return lose("connection to learner 0 lost: " + error.message());
    try {
      reader.feed(std::span<const uint8_t>(buffer.data(), bytes));
      while (std::optional<TcpFrame> frame = reader.next()) {
        std::lock_guard lock(mutex);
        learner_said_stop |= frame->kind == static_cast<uint8_t>(MessageTag::kStop);
        inbox.push_back(Message{0, static_cast<MessageTag>(frame->kind), std::move(frame->payload)});
      }
    } catch (const MalformedMessageError& malformed) {
      boost::system::error_code ignored;
      socket.close(ignored);
      return lose(std::string("learner 0 sent a malformed frame: ") + malformed.what());
    }
    read();
  });
}

void TcpActorTransport::State::write_next() {
  if (outgoing.empty()) {
    writing = false;
    return;
  }
  writing = true;
  asio::async_write(socket, asio::buffer(outgoing.front()),
                    [this](const boost::system::error_code& error, size_t) {
                      {
                        std::lock_guard lock(mutex);
                        unsent -= 1;
                        sent.notify_all();
                      }
                      outgoing.pop_front();
                      if (error) {
                        lose("connection to learner 0 lost: " + error.message());
                        return;
                      }
                      write_next();
                    });
}

TcpActorTransport::TcpActorTransport(const std::string& host, int port, const TcpHello& hello,
                                     std::chrono::duration<double> timeout, size_t max_frame_bytes)
    : state_(std::make_shared<State>(max_frame_bytes)) {
  state_->connect(host, port, timeout);
  keep_alive(state_->socket);
  asio::write(state_->socket,
              asio::buffer(encode_tcp_frame(static_cast<uint8_t>(HandshakeKind::kHello), hello.encode())));
  const TcpFrame answer = state_->read_frame_within(timeout);
  if (answer.kind == static_cast<uint8_t>(HandshakeKind::kRefused)) {
    throw InvalidArgumentError("learner 0 at " + host + ":" + std::to_string(port) + " " +
                               std::string(answer.payload.begin(), answer.payload.end()));
  }
  if (answer.kind != static_cast<uint8_t>(HandshakeKind::kWelcome)) {
    throw Error("learner 0 answered the hello with frame kind " + std::to_string(answer.kind));
  }
  state_->actor_id = decode_welcome(answer.payload);
  // Frames that followed the welcome in the same read wait in the reader.
  while (std::optional<TcpFrame> frame = state_->reader.next()) {
    state_->inbox.push_back(Message{0, static_cast<MessageTag>(frame->kind), std::move(frame->payload)});
  }
  state_->read();
  state_->io.restart();
  state_->thread = std::thread([state = state_.get()] { state->io.run(); });
}

TcpActorTransport::~TcpActorTransport() {
  asio::post(state_->io, [state = state_.get()] {
    boost::system::error_code ignored;
    state->socket.shutdown(tcp::socket::shutdown_both, ignored);
    state->socket.close(ignored);
  });
  state_->thread.join();
}

int TcpActorTransport::rank() const { return state_->actor_id; }

int TcpActorTransport::size() const { return state_->actor_id + 1; }

void TcpActorTransport::send(int destination, MessageTag tag, std::vector<uint8_t> bytes) {
  if (destination != 0) {
    throw InvalidArgumentError("a remote actor talks to learner 0 only, not rank " +
                               std::to_string(destination));
  }
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->lost.empty()) return;  // nobody is listening any more
    ++state_->unsent;
  }
  asio::post(state_->io,
             [state = state_.get(), frame = encode_tcp_frame(static_cast<uint8_t>(tag), bytes)]() mutable {
               state->outgoing.push_back(std::move(frame));
               if (!state->writing) state->write_next();
             });
}

std::optional<Message> TcpActorTransport::poll() {
  std::lock_guard lock(state_->mutex);
  if (!state_->inbox.empty()) {
    Message message = std::move(state_->inbox.front());
    state_->inbox.pop_front();
    return message;
  }
  if (!state_->lost.empty() && !state_->stop_handed_out && !state_->learner_said_stop) {
    state_->stop_handed_out = true;
    return Message{0, MessageTag::kStop, {static_cast<uint8_t>(RunEnd::kInterrupted)}};
  }
  return std::nullopt;
}

size_t TcpActorTransport::progress() {
  std::lock_guard lock(state_->mutex);
  return state_->unsent;
}

void TcpActorTransport::flush() {
  std::unique_lock lock(state_->mutex);
  state_->sent.wait(lock, [&] { return state_->unsent == 0 || !state_->lost.empty(); });
}

bool TcpActorTransport::stopped_by_learner() const {
  std::lock_guard lock(state_->mutex);
  return state_->learner_said_stop;
}

std::string TcpActorTransport::lost() const {
  std::lock_guard lock(state_->mutex);
  return state_->lost;
}

std::pair<std::string, int> parse_host_port(const std::string& text) {
  const size_t colon = text.rfind(':');
  std::string host = colon == std::string::npos ? "" : text.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    size_t used = 0;
    if (colon != std::string::npos) port = std::stoi(text.substr(colon + 1), &used);
    if (used != text.size() - colon - 1) port = -1;
  } catch (const std::exception&) {
    port = -1;
  }
  if (host.empty() || port < 1 || port > 65535) {
    throw InvalidArgumentError("--connect '" + text +
                               "': expected HOST:PORT with a port in 1-65535, e.g. "
                               "10.0.0.5:29500 or [::1]:29500");
  }
  return {host, port};
}

}  // namespace kvrl
