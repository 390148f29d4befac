#include "common/comm/remote_actor_server.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>, so
// <utility> comes first, out of clang-format's include sorting.
// clang-format off
#include <utility>
// clang-format on
#include <array>
#include <atomic>
#include <boost/asio.hpp>
#include <deque>
#include <future>
#include <mutex>
#include <optional>
#include <thread>

#include "common/comm/tcp_frames.h"
#include "common/comm/tcp_keep_alive.h"
#include "common/support/errors.h"
#include "common/support/logger.h"

namespace kvrl {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {

// Compares without returning early, so a wrong token's timing says nothing of the right one.
bool same_token(const std::string& given, const std::string& expected) {
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < given.size(); ++i) difference |= given[i] ^ expected[i % expected.size()];
  return difference == 0;
}

}  // namespace

struct RemoteActorServer::State {
  struct Connection;
  struct Inbound {
    Message message;
    std::shared_ptr<Connection> from;
  };

  RemoteActorServerOptions options;
  std::shared_ptr<Logger> logger;
  asio::io_context io;
  // Keeps the I/O thread running while no socket is open, for the destructor's last handlers.
  asio::executor_work_guard<asio::io_context::executor_type> keep_running = asio::make_work_guard(io);
  tcp::acceptor acceptor{io};
  asio::steady_timer accept_retry{io};
  std::thread thread;
  int next_id = 0;
  int live = 0;                                      // open sockets; I/O thread only
  std::map<int, std::shared_ptr<Connection>> by_id;  // I/O thread only
  mutable std::mutex mutex;                          // guards what follows
  std::deque<Inbound> inbox;
  std::map<std::string, int64_t> counters;
  int connected = 0;

  void count(const std::string& name) {
    std::lock_guard lock(mutex);
    ++counters[name];
  }
  void deliver(Message message, const std::shared_ptr<Connection>& from);
  void accept();
  void closed(const std::shared_ptr<Connection>& connection, const std::string& reason);
};

struct RemoteActorServer::State::Connection : std::enable_shared_from_this<Connection> {
  Connection(State& state, tcp::socket socket)
      : state(state), socket(std::move(socket)), handshake_timer(state.io), reader(kMaxHelloBytes) {}

  State& state;
  tcp::socket socket;
  asio::steady_timer handshake_timer;
  TcpFrameReader reader;
  std::array<uint8_t, 1 << 16> buffer{};
  std::deque<std::vector<uint8_t>> outgoing;
  size_t outgoing_bytes = 0;
  std::atomic<size_t> inbound_bytes{0};  // delivered, not yet polled
  bool writing = false;
  bool open = true;
  // Set: close once the queued frames went out, with this reason ("": already counted).
  std::optional<std::string> close_after_write;
  int id = -1;  // -1 until the hello is accepted
  std::string peer;

  void start() {
    boost::system::error_code ignored;
    const auto endpoint = socket.remote_endpoint(ignored);
    peer = endpoint.address().to_string() + ":" + std::to_string(endpoint.port());
    handshake_timer.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
        std::chrono::duration<double>(state.options.handshake_timeout_s)));
    handshake_timer.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
      if (!error && self->open && self->id < 0 && !self->close_after_write) {
        self->refuse("handshake_timeout", "no hello within the handshake timeout");
      }
    });
    read();
  }

  void read() {
    socket.async_read_some(asio::buffer(buffer), [self = shared_from_this()](
                                                     const boost::system::error_code& error, size_t bytes) {
      if (!self->open) return;
      if (error) {
        const bool mid_frame = self->reader.partial_bytes() > 0;
        self->close(error == asio::error::eof ? (mid_frame ? "truncated_frame" : "closed")
                                              : "connection_error");
        return;
      }
      try {
        self->reader.feed(std::span<const uint8_t>(self->buffer.data(), bytes));
        while (self->open) {
          std::optional<TcpFrame> frame = self->reader.next();
          if (!frame) break;
          self->handle(std::move(*frame));
        }
      } catch (const MalformedMessageError& malformed) {
        self->state.logger->warn(cat("remote actor ", self->peer, ": ", malformed.what(), "; dropping it"));
        self->close("malformed_frame");
        return;
      }
      if (self->open) self->read();
    });
  }

  void handle(TcpFrame frame) {
    if (close_after_write) return;  // refused or closing: nothing more is read from it
    if (id < 0) return greet(frame);
    if (frame.kind >= static_cast<uint8_t>(HandshakeKind::kHello)) {
      state.logger->warn(cat("remote actor ", id, " sent a handshake frame after joining; dropping it"));
      return close("protocol");
    }
    if (inbound_bytes + frame.payload.size() > state.options.max_queued_bytes) {
      state.logger->warn(cat("remote actor ", id, " has more than ", state.options.max_queued_bytes,
                             " bytes waiting for the learner; dropping it"));
      return close("inbound_limit");
    }
    inbound_bytes += frame.payload.size();
    state.deliver(Message{id, static_cast<MessageTag>(frame.kind), std::move(frame.payload)},
                  shared_from_this());
  }

  void greet(const TcpFrame& frame) {
    if (frame.kind != static_cast<uint8_t>(HandshakeKind::kHello)) {
      return refuse("protocol", "the first frame must be a hello");
    }
    const TcpHello hello = TcpHello::decode(frame.payload);
    if (hello.wire_version != kTcpFrameVersion) {
      return refuse("version", "wire version " + std::to_string(hello.wire_version) + ", learner 0 speaks " +
                                   std::to_string(kTcpFrameVersion));
    }
    if (hello.config_hash != state.options.config_hash) {
      return refuse("config", "config hash " + std::to_string(hello.config_hash) +
                                  " differs from the run's " + std::to_string(state.options.config_hash) +
                                  ": the model, environment or actor keys differ from the training's config");
    }
    if (!same_token(hello.token, state.options.token)) return refuse("token", "wrong token");
    if (static_cast<int>(state.by_id.size()) >= state.options.max_connections) {
      return refuse("connections", "learner 0 serves at most " +
                                       std::to_string(state.options.max_connections) + " remote actors");
    }
    handshake_timer.cancel();
    reader.set_max_payload_bytes(state.options.max_frame_bytes);
    keep_alive(socket);
    id = state.next_id++;
    state.by_id[id] = shared_from_this();
    write(encode_tcp_frame(static_cast<uint8_t>(HandshakeKind::kWelcome), encode_welcome(id)));
    state.count("accepted");
    {
      std::lock_guard lock(state.mutex);
      ++state.connected;
    }
    state.logger->info(cat("remote actor ", id, " joined from ", peer));
    state.deliver(Message{id, MessageTag::kActorJoined, {}}, nullptr);
  }

  void refuse(const std::string& reason, const std::string& why) {
    state.logger->warn(cat("refused a remote actor from ", peer, ": ", why));
    state.count("refused_" + reason);
    const std::string text = "refused: " + why;
    write(encode_tcp_frame(
        static_cast<uint8_t>(HandshakeKind::kRefused),
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
    close_after_write = "";
  }

  // Lets the frames queued for it go out first (the learners' stop), then closes.
  void close_when_sent(const std::string& reason) {
    close_after_write = reason;
    if (!writing) close(reason);
  }

  void write(std::vector<uint8_t> bytes) {
    if (!open) return;
    if (outgoing_bytes + bytes.size() > state.options.max_queued_bytes) {
      state.logger->warn(cat("remote actor ", id, " is not reading: more than ",
                             state.options.max_queued_bytes, " bytes queued for it; dropping it"));
      return close("outbound_limit");
    }
    outgoing_bytes += bytes.size();
    outgoing.push_back(std::move(bytes));
    if (!writing) write_next();
  }

  void write_next() {
    if (outgoing.empty() || !open) {
      writing = false;
      if (close_after_write) close(*close_after_write);
      return;
    }
    writing = true;
    asio::async_write(socket, asio::buffer(outgoing.front()),
                      [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                        if (!self->open) return;
                        self->outgoing_bytes -= self->outgoing.front().size();
                        self->outgoing.pop_front();
                        if (error) return self->close("connection_error");
                        self->write_next();
                      });
  }

  // An empty reason: a refused connection, already counted.
  void close(const std::string& reason) {
    if (!open) return;
    open = false;
    boost::system::error_code ignored;
    handshake_timer.cancel();
    socket.shutdown(tcp::socket::shutdown_both, ignored);
    socket.close(ignored);
    state.closed(shared_from_this(), reason);
  }
};

void RemoteActorServer::State::deliver(Message message, const std::shared_ptr<Connection>& from) {
  std::lock_guard lock(mutex);
  inbox.push_back({std::move(message), from});
}

void RemoteActorServer::State::closed(const std::shared_ptr<Connection>& connection,
                                      const std::string& reason) {
  --live;
  if (connection->id < 0) {
    if (!reason.empty()) count("refused_" + reason);
    return;
  }
  by_id.erase(connection->id);
  count("disconnected_" + reason);
  {
    std::lock_guard lock(mutex);
    --connected;
  }
  logger->warn(cat("remote actor ", connection->id, " left (", reason, ")"));
  deliver(Message{connection->id, MessageTag::kActorLeft, std::vector<uint8_t>(reason.begin(), reason.end())},
          nullptr);
}

void RemoteActorServer::State::accept() {
  acceptor.async_accept([this](const boost::system::error_code& error, tcp::socket socket) {
    if (error == asio::error::operation_aborted) return;
    if (error) {
      // Out of descriptors or buffers: try again a little later instead of spinning.
      logger->warn(cat("remote actors: accepting a connection failed (", error.message(), "); retrying"));
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](const boost::system::error_code& cancelled) {
        if (!cancelled) accept();
      });
      return;
    }
    // Connections that have not said hello yet are bounded too, so a flood of idle sockets
    // cannot exhaust the learner's descriptors (each also times out).
    if (live >= 2 * options.max_connections + 8) {
      boost::system::error_code ignored;
      socket.close(ignored);
      count("refused_pending");
    } else {
      ++live;
      std::make_shared<Connection>(*this, std::move(socket))->start();
    }
    accept();
  });
}

RemoteActorServer::RemoteActorServer(RemoteActorServerOptions options, std::shared_ptr<Logger> logger)
    : state_(std::make_shared<State>()) {
  if (options.token.empty()) {
    throw InvalidArgumentError("remote actors need a shared token: the token file is empty");
  }
  state_->options = std::move(options);
  state_->logger = std::move(logger);
  state_->next_id = state_->options.first_actor_id;
  boost::system::error_code error;
  const asio::ip::address address = asio::ip::make_address(state_->options.address, error);
  if (error)
    throw InvalidArgumentError("remote actors: '" + state_->options.address + "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(state_->options.port));
  state_->acceptor.open(endpoint.protocol());
  state_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  state_->acceptor.bind(endpoint, error);
  if (error) {
    throw Error("remote actors: cannot listen on " + state_->options.address + ":" +
                std::to_string(state_->options.port) + ": " + error.message());
  }
  state_->acceptor.listen();
  state_->accept();
  state_->thread = std::thread([state = state_.get()] { state->io.run(); });
}

RemoteActorServer::~RemoteActorServer() {
  asio::post(state_->io, [state = state_.get()] {
    boost::system::error_code ignored;
    state->acceptor.close(ignored);
    state->accept_retry.cancel();
    for (auto& [id, connection] : std::map(state->by_id)) connection->close_when_sent("learner_stopped");
  });
  // The last frames (the stop) get a moment to leave; an actor that does not read them
  // is cut off after it.
  for (int i = 0; i < 200 && connected() > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::promise<void> closed;
  asio::post(state_->io, [state = state_.get(), &closed] {
    for (auto& [id, connection] : std::map(state->by_id)) connection->close("learner_stopped");
    closed.set_value();
  });
  closed.get_future().wait();
  state_->io.stop();
  state_->thread.join();
}

int RemoteActorServer::port() const { return state_->acceptor.local_endpoint().port(); }

std::optional<Message> RemoteActorServer::poll() {
  std::lock_guard lock(state_->mutex);
  if (state_->inbox.empty()) return std::nullopt;
  State::Inbound inbound = std::move(state_->inbox.front());
  state_->inbox.pop_front();
  if (inbound.from) inbound.from->inbound_bytes -= inbound.message.bytes.size();
  return std::move(inbound.message);
}

void RemoteActorServer::send(int actor_id, MessageTag tag, std::vector<uint8_t> bytes) {
  std::vector<uint8_t> frame = encode_tcp_frame(static_cast<uint8_t>(tag), bytes);
  asio::post(state_->io, [state = state_.get(), actor_id, frame = std::move(frame)]() mutable {
    const auto connection = state->by_id.find(actor_id);
    if (connection == state->by_id.end()) {
      state->count("sends_dropped");
      return;
    }
    connection->second->write(std::move(frame));
  });
}

std::map<std::string, int64_t> RemoteActorServer::counters() const {
  std::lock_guard lock(state_->mutex);
  return state_->counters;
}

int RemoteActorServer::connected() const {
  std::lock_guard lock(state_->mutex);
  return state_->connected;
}

void ElasticTransport::send(int destination, MessageTag tag, std::vector<uint8_t> bytes) {
  if (destination < ranks_.size()) {
    ranks_.send(destination, tag, std::move(bytes));
  } else {
    server_.send(destination, tag, std::move(bytes));
  }
}

std::optional<Message> ElasticTransport::poll() {
  if (std::optional<Message> message = ranks_.poll()) return message;
  return server_.poll();
}

}  // namespace kvrl
