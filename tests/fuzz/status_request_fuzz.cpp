// libFuzzer target for the status server's HTTP rules (learner/status_request.h): any bytes
// a client sends, up to the server's 8 KiB buffer, must get one well-formed answer: a status
// line with 200, 400, 404, 405 or 431, the headers, a Content-Length that is the body's
// length (or no body, for HEAD), and Connection: close; a 200 carries one of the published
// bodies. Anything else (a crash, a sanitizer report, an exception, a malformed answer) is
// a finding.
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "learner/status_request.h"

namespace {

[[noreturn]] void finding(const char* what, std::string_view answer) {
  std::fprintf(stderr, "status_request_fuzz: %s in the answer:\n%.*s\n", what,
               static_cast<int>(answer.size()), answer.data());
  __builtin_trap();
}

void check_answer(std::string_view received, std::string_view answer, const kvrl::StatusBodies& bodies) {
  const size_t head_end = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || head_end == std::string_view::npos)
    finding("no status line or head", answer);
  const std::string_view code = answer.substr(9, 3);
  if (code != "200" && code != "400" && code != "404" && code != "405" && code != "431")
    finding("an unexpected status code", answer);
  if ((code == "431") != (received.find("\r\n\r\n") == std::string_view::npos))
    finding("431 if and only if the head has no end", answer);
  const std::string_view head = answer.substr(0, head_end + 2);
  const std::string_view body = answer.substr(head_end + 4);
  if (head.find("\r\nConnection: close\r\n") == std::string_view::npos)
    finding("no Connection: close", answer);
  const size_t length_at = head.find("\r\nContent-Length: ");
  if (length_at == std::string_view::npos) finding("no Content-Length", answer);
  const std::string length(head.substr(length_at + 18, head.find("\r\n", length_at + 2) - length_at - 18));
  if (!body.empty() && std::to_string(body.size()) != length) finding("a wrong Content-Length", answer);
  if (code == "200" && !body.empty() && body != bodies.status_json && body != bodies.metrics_text)
    finding("a 200 with a body that was never published", answer);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > kvrl::kMaxStatusRequestBytes) return 0;  // the server's buffer never holds more
  static const kvrl::StatusBodies bodies{"{\"update\": 7}", "# TYPE kvrl_updates counter\nkvrl_updates 7\n"};
  const std::string_view received(reinterpret_cast<const char*>(data), size);
  check_answer(received, kvrl::answer_status_request(received, bodies), bodies);
  return 0;
}
