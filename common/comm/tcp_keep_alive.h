// TCP keepalive on both ends of a remote actor's connection, so that a peer whose host
// vanished without closing the connection (a crash, a cut cable) is noticed within about
// 25 s instead of never: the connection then fails like any lost one.
#pragma once

// Boost 1.74's asio/awaitable.hpp uses std::exchange without including <utility>.
// clang-format off
#include <utility>
// clang-format on
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>

namespace kvrl {

// Probes after 10 s of silence, every 5 s, and gives up after 3 unanswered probes.
inline void keep_alive(boost::asio::ip::tcp::socket& socket) {
  boost::system::error_code ignored;
  socket.set_option(boost::asio::socket_base::keep_alive(true), ignored);
  const int idle_s = 10, interval_s = 5, probes = 3;
  setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof(idle_s));
  setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof(interval_s));
  setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof(probes));
}

}  // namespace kvrl
