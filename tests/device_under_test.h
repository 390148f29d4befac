// What the hardware tests (suffixes _CUDA and _NCCL) run on. On a machine with a GPU that
// is its first GPU. Without one they are skipped, unless the suite rehearses them
// (KVRL_REHEARSE=1, as `scripts/device-check.sh --rehearse` sets): then they run on the
// CPU with the same assertions, MPI standing in for NCCL, so that every GPU test has run
// somewhere before a GPU sees it.
#pragma once

#include <c10/core/Device.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>

namespace kvrl::test_support {

inline bool rehearsing() {
  const char* value = std::getenv("KVRL_REHEARSE");
  return value != nullptr && std::string(value) == "1";
}

inline c10::Device device_under_test() {
  return torch::cuda::is_available() ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
}

// Polls `done` every millisecond until it returns true or `deadline_s` passes; the failure
// names what was awaited and for how long, so a stuck collective fails instead of hanging.
template <typename Done>
::testing::AssertionResult within_deadline(double deadline_s, const std::string& awaited, Done done) {
  const auto start = std::chrono::steady_clock::now();
  while (!done()) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > deadline_s) {
      std::ostringstream message;
      message << "timed out after " << deadline_s << " s waiting for " << awaited;
      return ::testing::AssertionFailure() << message.str();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kvrl::test_support
