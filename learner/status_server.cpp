#include "learner/status_server.h"

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>, so
// <utility> comes first, out of clang-format's include sorting.
// clang-format off
#include <utility>
// clang-format on
#include <boost/asio.hpp>
#include <mutex>
#include <thread>

#include "common/support/errors.h"
#include "common/support/logger.h"
#include "learner/status_request.h"

namespace kvrl {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

}  // namespace

struct StatusServer::Impl {
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::thread thread;
  std::shared_ptr<Logger> logger;
  std::mutex mutex;
  StatusBodies bodies;  // guarded by mutex

  // One connection: read the request head, answer, close.
  struct Session : std::enable_shared_from_this<Session> {
    Session(Impl& server, tcp::socket socket)
        : server(server), socket(std::move(socket)), timer(server.io), buffer(kMaxStatusRequestBytes) {}

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
      // not_found: the buffer filled up without the blank line that ends a head (431).
      if (error && error != asio::error::not_found) return;  // closed, reset or timed out
      const auto received = buffer.data();
      std::string answer;
      {
        std::lock_guard<std::mutex> lock(server.mutex);
        answer = answer_status_request(
            std::string_view(static_cast<const char*>(received.data()), received.size()), server.bodies);
      }
      reply(std::move(answer));
    }

    void reply(std::string answer) {
      auto bytes = std::make_shared<std::string>(std::move(answer));
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
  impl_->bodies.status_json = std::move(status_json);
  impl_->bodies.metrics_text = std::move(metrics_text);
}

int StatusServer::port() const { return impl_->acceptor.local_endpoint().port(); }

}  // namespace kvrl
