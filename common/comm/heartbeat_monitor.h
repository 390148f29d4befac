// kvrl's own failure detector between ranks, independent of MPI. Open MPI notices a lost
// host only through its runtime's connections to mpirun; two hosts that lose each other
// while both still reach mpirun leave their ranks waiting in a collective for ever. So
// every rank runs a small UDP heartbeat on a thread of its own: it tells the peers that
// watch it that it is alive, every interval, whatever its main thread is doing (a long
// update, a blocking collective, a checkpoint), and it reports once when a peer it
// watches has been silent for the timeout. Liveness here means "the process runs and the
// network between us carries datagrams", not "it makes progress".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kvrl {

struct PeerEndpoint {
  int rank = -1;
  std::string name;     // how messages name it, e.g. "rank 3 (actor on node07)"
  std::string address;  // IPv4, dotted
  uint16_t port = 0;
};

struct SilentPeer {
  PeerEndpoint peer;
  double silent_s = 0;      // since its last heartbeat, or since watching began
  bool ever_heard = false;  // false: not one heartbeat arrived (a firewall?)
};

struct HeartbeatOptions {
  double interval_s = 1.0;  // between heartbeats
  double timeout_s = 30.0;  // silence that counts as lost
};

// One line naming every silent peer and how long each was silent.
std::string describe_silent_peers(const std::vector<SilentPeer>& silent, double timeout_s);

class HeartbeatMonitor {
 public:
  // Called once, on the monitor's thread, with every peer silent at that moment.
  using SilenceHandler = std::function<void(const std::vector<SilentPeer>&)>;

  // Binds a UDP socket on every interface, on a free port; nothing is sent before start().
  // Throws InvalidArgumentError for options out of range, Error when no socket can be bound.
  HeartbeatMonitor(int own_rank, HeartbeatOptions options);
  ~HeartbeatMonitor();
  HeartbeatMonitor(const HeartbeatMonitor&) = delete;
  HeartbeatMonitor& operator=(const HeartbeatMonitor&) = delete;

  uint16_t port() const;
  // Starts the thread: a heartbeat to every `notify` peer each interval, and `on_silence`
  // when any `watch` peer stays silent for the timeout (counted from now for a peer not
  // yet heard from). `job_token` tells this job's heartbeats from strays of another job.
  // Call once.
  void start(uint64_t job_token, const std::vector<PeerEndpoint>& notify,
             const std::vector<PeerEndpoint>& watch, SilenceHandler on_silence);
  // Stops sending and watching; peers that still watch this rank will report it.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrl
