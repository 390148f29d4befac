#include "common/comm/accelerator_probe.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace kvrl {
namespace {

TEST(AcceleratorProbe, StatesTheCpuFallbackWhenNoDeviceIsUsable) {
  if (torch::cuda::device_count() > 0) GTEST_SKIP() << "a GPU is present";
  const AcceleratorReport report = probe_accelerators();
  EXPECT_EQ(report.cuda_devices, 0);
  EXPECT_EQ(report.summary().rfind("no usable GPU: running on CPU", 0), 0u) << report.summary();
}

TEST(AcceleratorProbe, ReportsTheLinkedNcclAndCudaRuntimeWhenCompiledIn) {
  const AcceleratorReport report = probe_accelerators();
#ifdef KVRL_HAVE_CUDA
  EXPECT_TRUE(report.cuda_compiled_in);
  EXPECT_GE(report.nccl_version, 20000);  // NCCL 2.x encodes as major*10000 + minor*100 + patch
  EXPECT_GE(report.cuda_runtime_version, 12000);
  EXPECT_NE(report.summary().find("NCCL 2."), std::string::npos) << report.summary();
#else
  EXPECT_FALSE(report.cuda_compiled_in);
  EXPECT_NE(report.summary().find("without its CUDA/NCCL paths"), std::string::npos);
#endif
}

// GPUs as the driver lists them (nvidia-smi, through NVML rather than the CUDA runtime
// the probe asks), narrowed by CUDA_VISIBLE_DEVICES; 0 where nvidia-smi is missing.
int gpus_listed_by_the_driver() {
  FILE* listing = popen("nvidia-smi -L 2>/dev/null", "r");
  if (listing == nullptr) return 0;
  int listed = 0;
  char line[512];
  while (std::fgets(line, sizeof(line), listing) != nullptr)
    listed += std::strncmp(line, "GPU ", 4) == 0 ? 1 : 0;
  pclose(listing);
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return listed;
  const std::string ids = visible;
  const int named = ids.empty() ? 0 : 1 + static_cast<int>(std::count(ids.begin(), ids.end(), ','));
  return std::min(listed, named);
}

// With a GPU the probe must count what the driver lists and name a driver; in a rehearsal
// on the CPU it must count none and say so.
TEST(AcceleratorProbe, CountsTheGpusTheDriverLists_CUDA) {
  const AcceleratorReport report = probe_accelerators();
  const int listed = gpus_listed_by_the_driver();
  EXPECT_EQ(report.cuda_devices, listed) << report.summary();
  if (listed > 0) {
    EXPECT_EQ(report.summary().rfind(std::to_string(listed) + " CUDA device(s) usable", 0), 0u)
        << report.summary();
#ifdef KVRL_HAVE_CUDA
    EXPECT_GT(report.cuda_driver_version, 0) << report.summary();
    EXPECT_EQ(report.summary().find("driver none"), std::string::npos) << report.summary();
#endif
  } else {
    EXPECT_EQ(report.summary().rfind("no usable GPU: running on CPU", 0), 0u) << report.summary();
  }
}

}  // namespace
}  // namespace kvrl
