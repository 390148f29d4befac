// A remote actor's end of the network (`kvrl actor --connect HOST:PORT`): one TCP
// connection to learner 0's RemoteActorServer, opened with a hello and a welcome that gives
// the actor its id, which is its rank(). Learner 0 is rank 0, the only peer. Sends queue
// and go out on an I/O thread; received frames wait for poll(). When the connection is
// lost, poll() hands out a kStop from learner 0 (RunEnd::kInterrupted) once, so the actor
// loop ends as it does when the learners stop, and lost() says why.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/comm/tcp_frames.h"
#include "common/comm/transport.h"

namespace kvrl {

class TcpActorTransport : public Transport {
 public:
  // Connects to host:port and says hello; returns once welcomed. Throws Error naming the
  // address when the connection fails within `timeout`, and the learner's reason when it
  // refuses (token, config, version, connections).
  TcpActorTransport(const std::string& host, int port, const TcpHello& hello,
                    std::chrono::duration<double> timeout, size_t max_frame_bytes);
  ~TcpActorTransport() override;

  int rank() const override;
  int size() const override;
  void send(int destination, MessageTag tag, std::vector<uint8_t> bytes) override;
  std::optional<Message> poll() override;
  size_t progress() override;
  // Waits until the queued sends went out, or the connection is gone.
  void flush() override;
  // Why the connection ended ("" while it is up).
  std::string lost() const;
  // Whether learner 0 itself said stop before the connection ended (a normal end).
  bool stopped_by_learner() const;

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// "HOST:PORT" (an IPv6 host in brackets) into its parts; throws InvalidArgumentError
// naming the text and the form expected.
std::pair<std::string, int> parse_host_port(const std::string& text);

}  // namespace kvrl
