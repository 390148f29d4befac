#include "common/accelerator_probe.h"

#include <gtest/gtest.h>
#include <torch/cuda.h>

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

TEST(AcceleratorProbe, CountsTheDevicesLibTorchSees_CUDA) {
  const AcceleratorReport report = probe_accelerators();
  EXPECT_EQ(report.cuda_devices, static_cast<int>(torch::cuda::device_count()));
  EXPECT_NE(report.summary().find("CUDA device(s) usable"), std::string::npos);
}

}  // namespace
}  // namespace kvrl
