#include "learner/status_server.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>, so
// <utility> comes first, out of clang-format's include sorting.
// clang-format off
#include <utility>
// clang-format on
#include <boost/asio.hpp>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/support/errors.h"
#include "common/support/logger.h"

namespace kvrl {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

struct Response {
  int code;
  std::string reason;
  std::string content_type;
  std::string body;
};

std::string serialize(const Response& response, bool head_only) {
  std::ostringstream out;
  out << "HTTP/1.1 " << response.code << ' ' << response.reason << "\r\n"
      << "Content-Type: " << response.content_type << "\r\n"
      << "Content-Length: " << response.body.size() << "\r\n"
      << "Cache-Control: no-store\r\nConnection: close\r\n\r\n";
  if (!head_only) out << response.body;
  return out.str();
}

Response error_response(int code, const std::string& reason) {
  return {code, reason, "text/plain; charset=utf-8", std::to_string(code) + " " + reason + "\n"};
}

}  // namespace

struct StatusServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  std::shared_ptr<Logger> logger;
  std::mutex mutex;
  std::string status_json = "{}";
  std::string metrics_text;

  // One connection: read the request head, answer, close.
  struct Session : std::enable_shared_from_this<Session> {
    Session(Impl& server, tcp::socket socket)
        : server(server), socket(std::move(socket)), timer(server.io), buffer(kMaxRequestBytes) {}

    void start() {
      timer.expires_after(std::chrono::seconds(5));
      timer.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
        if (!error) self->socket.close();  // too slow: drop it
      });
      asio::async_read_until(socket, buffer, "\r\n\r\n",
                             [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                               self->on_request(error);
                             });
    }

    void on_request(const boost::system::error_code& error) {
      if (error == asio::error::not_found)
        return reply(error_response(431, "Request Header Fields Too Large"), false);
      if (error) return;  // closed, reset or timed out
      std::istream in(&buffer);
      std::string line;
      std::getline(in, line);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      std::istringstream request_line(line);
      std::string method, target, version, extra;
      request_line >> method >> target >> version;
      if (method.empty() || target.empty() || version.rfind("HTTP/1.", 0) != 0 || (request_line >> extra) ||
          target.front() != '/') {
        return reply(error_response(400, "Bad Request"), false);
      }
      if (method != "GET" && method != "HEAD") return reply(error_response(405, "Method Not Allowed"), false);
      const std::string path = target.substr(0, target.find('?'));
      Response response;
      {
        std::lock_guard<std::mutex> lock(server.mutex);
        if (path == "/metrics") {
          response = {200, "OK", "text/plain; version=0.0.4; charset=utf-8", server.metrics_text};
        } else if (path == "/status") {
          response = {200, "OK", "application/json", server.status_json};
        } else {
          response = error_response(404, "Not Found");
        }
      }
      reply(response, method == "HEAD");
    }

    void reply(const Response& response, bool head_only) {
      auto bytes = std::make_shared<std::string>(serialize(response, head_only));
      asio::async_write(socket, asio::buffer(*bytes),
                        [self = shared_from_this(), bytes](const boost::system::error_code&, size_t) {
                          boost::system::error_code ignored;
                          self->socket.shutdown(tcp::socket::shutdown_both, ignored);
                          self->socket.close(ignored);
                          self->timer.cancel();
                        });
    }

    Impl& server;
    tcp::socket socket;
    asio::steady_timer timer;
    asio::streambuf buffer;
  };

  void accept() {
    acceptor.async_accept([this](const boost::system::error_code& error, tcp::socket socket) {
      if (error == asio::error::operation_aborted) return;
      if (!error) std::make_shared<Session>(*this, std::move(socket))->start();
      accept();
    });
  }
};

StatusServer::StatusServer(const std::string& address, int port, std::shared_ptr<Logger> logger)
    : impl_(std::make_unique<Impl>()) {
  impl_->logger = std::move(logger);
  boost::system::error_code error;
  const asio::ip::address ip = asio::ip::make_address(address, error);
  if (error)
    throw InvalidArgumentError("status.address '" + address +
                               "' is not an IP address (e.g. 127.0.0.1 or 0.0.0.0)");
  if (port < 1 || port > 65535)
    throw InvalidArgumentError("status.port " + std::to_string(port) + " must be in [1, 65535]");
  const tcp::endpoint endpoint(ip, static_cast<unsigned short>(port));
  impl_->acceptor.open(endpoint.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(endpoint, error);
  if (error)
    throw Error("cannot serve status on " + address + ":" + std::to_string(port) + ": " + error.message());
  impl_->acceptor.listen();
  impl_->accept();
  impl_->thread = std::thread([this] { impl_->io.run(); });
  impl_->logger->info("serving /metrics and /status on http://" + address + ":" +
                      std::to_string(this->port()));
}

StatusServer::~StatusServer() {
  impl_->io.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

void StatusServer::publish(std::string status_json, std::string metrics_text) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->status_json = std::move(status_json);
  impl_->metrics_text = std::move(metrics_text);
}

int StatusServer::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace kvrl
