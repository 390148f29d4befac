// Learner 0's door for elastic actors: actor processes outside the MPI job (`kvrl actor
// --connect HOST:PORT`) join and leave a running training over TCP (Boost.Asio, one I/O
// thread). A connection opens with a hello (frame version, config hash, shared token;
// common/comm/tcp_frames.h); a wrong one is refused with its reason and closed. An actor
// that is let in gets an id above every MPI rank, never reused, and from then on carries
// the same messages as an MPI actor: episodes up; credit, weights and stop down.
//
// The learner loop sees joins and departures as messages (kActorJoined, kActorLeft) among
// the actors' own, through poll(), and never waits for a remote actor: a send to one that
// left is dropped. Limits, each refused or dropped with a named reason: connections, a
// frame's payload size, and bytes queued per connection in either direction (a peer that
// floods or stops reading is disconnected). Trust model: docs/reliability.md.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/comm/transport.h"

namespace kvrl {

class Logger;

struct RemoteActorServerOptions {
  std::string address = "127.0.0.1";     // the interface to listen on; loopback by default
  int port = 0;                          // 0: any free port (see port())
  std::string token;                     // the shared secret every actor must present; not empty
  uint64_t config_hash = 0;              // of the keys that define the model and environment
  int first_actor_id = 1;                // ids are given out from here on
  int max_connections = 64;              // connected actors at once
  size_t max_frame_bytes = 256u << 20;   // a frame's payload
  size_t max_queued_bytes = 512u << 20;  // per connection and direction
  double handshake_timeout_s = 10;       // to send a hello after connecting
};

class RemoteActorServer {
 public:
  // Binds and starts listening. Throws InvalidArgumentError for an empty token, Error when
  // the address cannot be bound (naming it).
  RemoteActorServer(RemoteActorServerOptions options, std::shared_ptr<Logger> logger);
  // Closes every connection and stops the I/O thread.
  ~RemoteActorServer();
  RemoteActorServer(const RemoteActorServer&) = delete;
  RemoteActorServer& operator=(const RemoteActorServer&) = delete;

  int port() const;
  // The next message from a connected actor, or a join or departure; never blocks.
  std::optional<Message> poll();
  // Queues a message to actor `actor_id`; dropped when it is not connected. Never blocks.
  void send(int actor_id, MessageTag tag, std::vector<uint8_t> bytes);
  // Counters by name: accepted, refused_<reason>, disconnected_<reason>, sends_dropped.
  std::map<std::string, int64_t> counters() const;
  // Actors connected now.
  int connected() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Routes a learner's messages: ranks of the MPI job through `ranks`, remote actors (ids
// from `server`) through the server; polls both. flush() and progress() concern the MPI
// sends only: the learners never wait for a remote actor.
class ElasticTransport : public Transport {
 public:
  ElasticTransport(Transport& ranks, RemoteActorServer& server) : ranks_(ranks), server_(server) {}
  int rank() const override { return ranks_.rank(); }
  int size() const override { return ranks_.size(); }
  void send(int destination, MessageTag tag, std::vector<uint8_t> bytes) override;
  std::optional<Message> poll() override;
  size_t progress() override { return ranks_.progress(); }
  void flush() override { ranks_.flush(); }

 private:
  Transport& ranks_;
  RemoteActorServer& server_;
};

}  // namespace kvrl
