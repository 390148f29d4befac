#include "common/support/process_signals.h"

#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>

namespace kvrl {
namespace {

std::atomic<int> requested_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the flag is written from a signal handler");

// The crash line is formatted before any crash, so the handler only calls write().
char crash_prefix[128] = "kvrl: a rank";

void on_stop_request(int signal_number) {
  int expected = 0;
  requested_signal.compare_exchange_strong(expected, signal_number);
}

void on_crash(int signal_number) {
  const char* name = sigabbrev_np(signal_number);
  char line[256];
  // snprintf is not async-signal-safe; strlen and memcpy on our own buffers are.
  size_t length = 0;
  auto append = [&](const char* text) {
    const size_t n = std::min(std::strlen(text), sizeof(line) - 1 - length);
    std::memcpy(line + length, text, n);  // NOLINT(bugprone-not-null-terminated-result): sent by length
    length += n;
  };
  append(crash_prefix);
  append(" crashed: SIG");
  append(name ? name : "?");
  append("\n");
  [[maybe_unused]] const ssize_t written = write(STDERR_FILENO, line, length);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

}  // namespace

void install_stop_request_handlers() {
  for (int signal_number : {SIGINT, SIGTERM, SIGUSR1}) {
    struct sigaction action {};
    action.sa_handler = on_stop_request;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(signal_number, &action, nullptr);
  }
}

int stop_requested() { return requested_signal.load(); }

void request_stop(int signal_number) { on_stop_request(signal_number); }

std::string signal_name(int signal_number) {
  const char* name = sigabbrev_np(signal_number);
  return name ? std::string("SIG") + name : "signal " + std::to_string(signal_number);
}

void install_crash_reporter(int rank, const std::string& role) {
  std::snprintf(crash_prefix, sizeof(crash_prefix), "kvrl: rank %d (%s)", rank, role.c_str());
  for (int signal_number : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) {
    struct sigaction action {};
    action.sa_handler = on_crash;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    sigaction(signal_number, &action, nullptr);
  }
}

}  // namespace kvrl
