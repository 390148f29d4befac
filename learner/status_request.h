// The status server's HTTP rules as one pure function, apart from its sockets
// (learner/status_server.h): what to answer to the bytes a connection sent. Kept apart so
// the rules are fuzzed without a connection (tests/fuzz/status_request_fuzz.cpp).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kvrl {

// The most a request head may take, its blank line included; a longer one gets 431.
inline constexpr size_t kMaxStatusRequestBytes = 8192;

// What the training loop published last, served as is.
struct StatusBodies {
  std::string status_json = "{}";
  std::string metrics_text;
};

// The bytes to send back for `received`, what a connection sent: at most
// kMaxStatusRequestBytes holding the blank line ("\r\n\r\n") that ends a request head, or
// without one when the head did not fit (431 Request Header Fields Too Large). Only the
// request line counts: one that is not `METHOD /target HTTP/1.x` gets 400, a method other
// than GET or HEAD 405, a path other than /metrics or /status (a query is ignored) 404.
// Every answer has Content-Type, Content-Length and Connection: close; HEAD gets no body.
// Pure and thread-safe; never throws but std::bad_alloc.
std::string answer_status_request(std::string_view received, const StatusBodies& bodies);

}  // namespace kvrl
