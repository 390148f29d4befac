#include "common/comm/accelerator_probe.h"

#include <torch/cuda.h>

#include <sstream>

#ifdef KVRL_HAVE_CUDA
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace kvrl {
namespace {

std::string dotted(int version, int major_div, int minor_div) {
  return std::to_string(version / major_div) + "." + std::to_string((version % major_div) / minor_div);
}

}  // namespace

AcceleratorReport probe_accelerators() {
  AcceleratorReport report;
  // DeviceIndex is a signed char; a count is never negative.
  report.cuda_devices = static_cast<int>(static_cast<unsigned char>(torch::cuda::device_count()));
#ifdef KVRL_HAVE_CUDA
  report.cuda_compiled_in = true;
  // Both calls answer without a GPU; a failure leaves the version at zero.
  if (cudaRuntimeGetVersion(&report.cuda_runtime_version) != cudaSuccess) report.cuda_runtime_version = 0;
  if (cudaDriverGetVersion(&report.cuda_driver_version) != cudaSuccess) report.cuda_driver_version = 0;
  if (ncclGetVersion(&report.nccl_version) != ncclSuccess) report.nccl_version = 0;
#endif
  return report;
}

std::string AcceleratorReport::summary() const {
  std::ostringstream line;
  if (cuda_devices > 0) {
    line << cuda_devices << " CUDA device(s) usable";
  } else {
    line << "no usable GPU: running on CPU";
  }
  if (cuda_compiled_in) {
    line << " (CUDA runtime " << dotted(cuda_runtime_version, 1000, 10) << ", driver "
         << (cuda_driver_version ? dotted(cuda_driver_version, 1000, 10) : std::string("none")) << ", NCCL "
         << nccl_version / 10000 << "." << (nccl_version % 10000) / 100 << "." << nccl_version % 100 << ")";
  } else {
    line << " (kvrl built without its CUDA/NCCL paths)";
  }
  return line.str();
}

}  // namespace kvrl
