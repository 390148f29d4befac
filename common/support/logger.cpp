#include "common/support/logger.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <stdexcept>
#include <vector>

namespace kvrl {

struct Logger::Impl {
  std::shared_ptr<spdlog::logger> logger;
  std::shared_ptr<spdlog::logger> file_only;  // null without a log file
};

Logger::Logger(int rank, const std::string& role, const std::string& log_file, const std::string& level)
    : impl_(std::make_unique<Impl>()) {
  std::vector<spdlog::sink_ptr> sinks{std::make_shared<spdlog::sinks::stderr_color_sink_mt>()};
  if (!log_file.empty())
    sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_file, /*truncate=*/true));
  impl_->logger = std::make_shared<spdlog::logger>("rank" + std::to_string(rank), sinks.begin(), sinks.end());
  if (!log_file.empty())
    impl_->file_only = std::make_shared<spdlog::logger>("rank" + std::to_string(rank), sinks.back());
  const std::string pattern =
      "[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + " " + role + "] [%l] %v";
  impl_->logger->set_pattern(pattern);
  const char* from_env = std::getenv("KVRL_LOG_LEVEL");
  const std::string chosen = from_env && *from_env ? from_env : level;
  const auto parsed = spdlog::level::from_str(chosen);
  if (parsed == spdlog::level::off && chosen != "off") {
    // errors.h would pull LibTorch's include path into this file; a std error suffices.
    throw std::invalid_argument("log level '" + chosen + "' must be trace, debug, info, warn, error or off");
  }
  impl_->logger->set_level(parsed);
  impl_->logger->flush_on(spdlog::level::info);
  if (impl_->file_only) {
    impl_->file_only->set_level(parsed);
    impl_->file_only->flush_on(spdlog::level::info);
  }
}

Logger::~Logger() = default;

void Logger::debug(const std::string& message) { impl_->logger->debug(message); }
void Logger::info(const std::string& message) { impl_->logger->info(message); }
void Logger::warn(const std::string& message) { impl_->logger->warn(message); }
void Logger::error(const std::string& message) { impl_->logger->error(message); }
void Logger::info_to_file(const std::string& message) {
  if (impl_->file_only) impl_->file_only->info(message);
}

}  // namespace kvrl
