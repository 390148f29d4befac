// GoogleTest main shared by every kvrl test binary. Tests that need hardware or a
// launcher carry a suffix (_CUDA, _NCCL, _MPI); where that is missing they are skipped
// loudly instead of failing, so ctest stays green on CPU-only machines and the same
// tests run for real where the hardware exists. Under KVRL_REHEARSE=1 the _CUDA and _NCCL
// tests run on the CPU instead (tests/device_under_test.h).
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/device_under_test.h"

namespace {

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string negative;
  auto skip = [&](const char* suffix, const char* reason) {
    std::fprintf(stderr, "[ SKIPPING ] tests ending in %s: %s\n", suffix, reason);
    negative += std::string(negative.empty() ? "" : ":") + "*" + suffix;
  };
  if (!torch::cuda::is_available() && kvrl::test_support::rehearsing()) {
    std::fprintf(stderr, "[ REHEARSING ] tests ending in _CUDA and _NCCL on the CPU (KVRL_REHEARSE=1)\n");
  } else if (!torch::cuda::is_available()) {
    skip("_CUDA", "no usable CUDA device");
    skip("_NCCL", "no usable CUDA device for NCCL");
  }
  if (!launched_by_mpi()) skip("_MPI", "not launched by mpiexec");
  if (!negative.empty()) {
    std::string filter = ::testing::GTEST_FLAG(filter);
    const bool has_negative = filter.find('-') != std::string::npos;
    ::testing::GTEST_FLAG(filter) = filter + (has_negative ? ":" : "-") + negative;
  }
  return RUN_ALL_TESTS();
}
