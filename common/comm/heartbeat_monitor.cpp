#include "common/comm/heartbeat_monitor.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>, so
// <utility> comes first, out of clang-format's include sorting.
// clang-format off
#include <utility>
// clang-format on
#include <array>
#include <boost/asio.hpp>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <sstream>
#include <thread>

#include "common/support/errors.h"

namespace kvrl {
namespace {

namespace asio = boost::asio;
using asio::ip::udp;
using Clock = std::chrono::steady_clock;

// A heartbeat: magic, format version, job token, sender rank, sequence number; 24 bytes,
// little-endian as every host kvrl runs on.
constexpr uint32_t kMagic = 0x4248564b;  // "KVHB"
constexpr uint16_t kVersion = 1;
constexpr size_t kHeartbeatBytes = 24;

std::array<uint8_t, kHeartbeatBytes> encode_heartbeat(uint64_t token, int32_t rank, uint32_t sequence) {
  std::array<uint8_t, kHeartbeatBytes> bytes{};
  const uint16_t flags = 0;
  std::memcpy(bytes.data(), &kMagic, 4);
  std::memcpy(bytes.data() + 4, &kVersion, 2);
  std::memcpy(bytes.data() + 6, &flags, 2);
  std::memcpy(bytes.data() + 8, &token, 8);
  std::memcpy(bytes.data() + 16, &rank, 4);
  std::memcpy(bytes.data() + 20, &sequence, 4);
  return bytes;
}

// The sender's rank, or -1 for anything that is not a heartbeat of this job.
int32_t decode_heartbeat(const uint8_t* bytes, size_t size, uint64_t token) {
  if (size != kHeartbeatBytes) return -1;
  uint32_t magic = 0;
  uint16_t version = 0;
  uint64_t sender_token = 0;
  int32_t rank = -1;
  std::memcpy(&magic, bytes, 4);
  std::memcpy(&version, bytes + 4, 2);
  std::memcpy(&sender_token, bytes + 8, 8);
  std::memcpy(&rank, bytes + 16, 4);
  if (magic != kMagic || version != kVersion || sender_token != token) return -1;
  return rank;
}

double seconds(Clock::duration duration) { return std::chrono::duration<double>(duration).count(); }

}  // namespace

std::string describe_silent_peers(const std::vector<SilentPeer>& silent, double timeout_s) {
  std::ostringstream text;
  text.precision(1);
  text << std::fixed;
  for (size_t i = 0; i < silent.size(); ++i) {
    const SilentPeer& s = silent[i];
    text << (i ? "; " : "") << s.peer.name << " at " << s.peer.address << ":" << s.peer.port;
    if (s.ever_heard) {
      text << ": no heartbeat for " << s.silent_s << " s";
    } else {
      text << ": not one heartbeat in " << s.silent_s << " s (is UDP to that port blocked?)";
    }
  }
  text << " (run.peer_timeout_s = " << timeout_s << ")";
  return text.str();
}

struct HeartbeatMonitor::Impl {
  struct Watched {
    PeerEndpoint peer;
    Clock::time_point last;
    bool heard = false;
  };

  asio::io_context io;
  udp::socket socket{io};
  asio::steady_timer timer{io};
  std::thread thread;
  int own_rank = -1;
  uint64_t token = 0;
  HeartbeatOptions options;
  uint32_t sequence = 0;
  std::vector<udp::endpoint> notify;
  std::map<int, Watched> watched;  // by rank; touched by the monitor's thread only once started
  SilenceHandler on_silence;
  bool reported = false;
  Clock::time_point last_tick;
  std::array<uint8_t, 64> inbox{};
  udp::endpoint sender;

  void receive() {
    socket.async_receive_from(asio::buffer(inbox), sender,
                              [this](const boost::system::error_code& error, size_t size) {
                                if (error == asio::error::operation_aborted) return;
                                if (!error) note_heartbeat(decode_heartbeat(inbox.data(), size, token));
                                receive();  // a refused or odd datagram must not end the watch
                              });
  }

  void note_heartbeat(int32_t rank) {
    auto peer = watched.find(rank);
    if (peer == watched.end()) return;
    peer->second.last = Clock::now();
    peer->second.heard = true;
  }

  void tick() {
    const auto bytes = encode_heartbeat(token, own_rank, sequence++);
    for (const udp::endpoint& peer : notify) {
      boost::system::error_code ignored;  // an unreachable peer is what the watch is for
      socket.send_to(asio::buffer(bytes), peer, 0, ignored);
    }
    report_silence();
    timer.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options.interval_s)));
    timer.async_wait([this](const boost::system::error_code& error) {
      if (!error) tick();
    });
  }

  // A watcher that did not run for a while (stopped, swapped out, throttled) has not read
  // the heartbeats that arrived meanwhile: it starts its count afresh instead of blaming
  // every peer for its own pause.
  void forgive_own_pause(Clock::time_point now) {
    if (seconds(now - last_tick) > options.timeout_s / 2) {
      for (auto& [rank, w] : watched) w.last = now;
    }
    last_tick = now;
  }

  void report_silence() {
    if (reported) return;
    const auto now = Clock::now();
    forgive_own_pause(now);
    std::vector<SilentPeer> silent;
    for (const auto& [rank, w] : watched) {
      const double quiet = seconds(now - w.last);
      if (quiet > options.timeout_s) silent.push_back({w.peer, quiet, w.heard});
    }
    if (silent.empty()) return;
    reported = true;
    on_silence(silent);
  }
};

HeartbeatMonitor::HeartbeatMonitor(int own_rank, HeartbeatOptions options) : impl_(std::make_unique<Impl>()) {
  if (!(options.interval_s > 0) || !(options.timeout_s > options.interval_s) ||
      !std::isfinite(options.timeout_s)) {
    throw InvalidArgumentError("heartbeat interval " + std::to_string(options.interval_s) +
                               " s and timeout " + std::to_string(options.timeout_s) +
                               " s: the interval must be above 0 and below the timeout");
  }
  impl_->own_rank = own_rank;
  impl_->options = options;
  boost::system::error_code error;
  impl_->socket.open(udp::v4(), error);
  if (!error) impl_->socket.bind(udp::endpoint(udp::v4(), 0), error);
  if (error) throw Error("cannot open a UDP socket for heartbeats: " + error.message());
}

HeartbeatMonitor::~HeartbeatMonitor() { stop(); }

uint16_t HeartbeatMonitor::port() const { return impl_->socket.local_endpoint().port(); }

void HeartbeatMonitor::start(uint64_t job_token, const std::vector<PeerEndpoint>& notify,
                             const std::vector<PeerEndpoint>& watch, SilenceHandler on_silence) {
  if (impl_->thread.joinable()) throw Error("HeartbeatMonitor::start called twice");
  impl_->token = job_token;
  for (const PeerEndpoint& peer : notify) {
    boost::system::error_code error;
    const auto address = asio::ip::make_address_v4(peer.address, error);
    if (error)
      throw InvalidArgumentError("heartbeat address '" + peer.address + "' of " + peer.name +
                                 " is not an IPv4 address");
    impl_->notify.emplace_back(address, peer.port);
  }
  const auto now = Clock::now();
  for (const PeerEndpoint& peer : watch) impl_->watched[peer.rank] = {peer, now, false};
  impl_->last_tick = now;
  impl_->on_silence = std::move(on_silence);
  impl_->receive();
  impl_->tick();
  impl_->thread = std::thread([impl = impl_.get()] { impl->io.run(); });
}

void HeartbeatMonitor::stop() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace kvrl
