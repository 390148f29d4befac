#include "learner/status_request.h"

#include <sstream>

namespace kvrl {
namespace {

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

std::string error_answer(int code, const std::string& reason) {
  return serialize({code, reason, "text/plain; charset=utf-8", std::to_string(code) + " " + reason + "\n"},
                   /*head_only=*/false);
}

}  // namespace

std::string answer_status_request(std::string_view received, const StatusBodies& bodies) {
  if (received.find("\r\n\r\n") == std::string_view::npos)
    return error_answer(431, "Request Header Fields Too Large");
  std::string line(received.substr(0, received.find('\n')));
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::istringstream request_line(line);
  std::string method, target, version, extra;
  request_line >> method >> target >> version;
  if (method.empty() || target.empty() || version.rfind("HTTP/1.", 0) != 0 || (request_line >> extra) ||
      target.front() != '/') {
    return error_answer(400, "Bad Request");
  }
  if (method != "GET" && method != "HEAD") return error_answer(405, "Method Not Allowed");
  const std::string path = target.substr(0, target.find('?'));
  const bool head_only = method == "HEAD";
  if (path == "/metrics")
    return serialize({200, "OK", "text/plain; version=0.0.4; charset=utf-8", bodies.metrics_text}, head_only);
  if (path == "/status") return serialize({200, "OK", "application/json", bodies.status_json}, head_only);
  return serialize({404, "Not Found", "text/plain; charset=utf-8", "404 Not Found\n"}, head_only);
}

}  // namespace kvrl
