// Learner 0's live status over HTTP/1.1 (Boost.Asio, one thread of its own):
//   GET /metrics  the Prometheus text exposition format (version 0.0.4)
//   GET /status   JSON: config hash, ranks and roles, versions, counters
// Read-only: any other method gets 405, any other path 404, a request that is not
// HTTP/1.x 400, a request head over 8 KiB 431 (these rules: learner/status_request.h), and
// a client that sends nothing for 5 s is dropped. Every response closes its connection.
// The training loop publishes both bodies after each update; requests are answered from
// the last published copy and never wait on training.
#pragma once

#include <memory>
#include <string>

namespace kvrl {

class Logger;

class StatusServer {
 public:
  // Binds `address`:`port` (port 0 is not allowed here: the caller decides whether to
  // serve at all) and starts serving. Throws InvalidArgumentError naming the address when
  // it is not an IP address, Error when the port cannot be bound.
  StatusServer(const std::string& address, int port, std::shared_ptr<Logger> logger);
  ~StatusServer();  // stops the thread
  StatusServer(const StatusServer&) = delete;
  StatusServer& operator=(const StatusServer&) = delete;

  void publish(std::string status_json, std::string metrics_text);
  int port() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvrl
