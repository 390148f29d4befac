// Per-rank logging: every line carries time, rank, role and level, and goes to the
// console and to the rank's file in the run directory. spdlog does the work behind this
// interface: LibTorch ships its own, newer {fmt} headers, which shadow the system {fmt}
// that Debian's spdlog is built against, so spdlog is only ever included from logger.cpp,
// compiled without LibTorch's include path.
#pragma once

#include <memory>
#include <sstream>
#include <string>

namespace kvrl {

class Logger {
 public:
  // level: trace, debug, info, warn, error or off (KVRL_LOG_LEVEL overrides it). An empty
  // log_file logs to the console only. Throws InvalidArgumentError on an unknown level.
  Logger(int rank, const std::string& role, const std::string& log_file, const std::string& level);
  ~Logger();
  Logger(const Logger&) = delete;
  Logger& operator=(const Logger&) = delete;

  void debug(const std::string& message);
  void info(const std::string& message);
  void warn(const std::string& message);
  void error(const std::string& message);
  // An info line for the log file only: the console shows progress its own way.
  void info_to_file(const std::string& message);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Concatenates its arguments with operator<<: cat("step ", 3, " of ", 10).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

}  // namespace kvrl
