// What this process can run on: the CUDA devices LibTorch sees and, when kvrl was built
// with them, the CUDA runtime and NCCL versions. Every rank logs this once at start, so a
// CPU fallback is always stated, never silent.
#pragma once

#include <string>

namespace kvrl {

struct AcceleratorReport {
  bool cuda_compiled_in = false;  // kvrl's CUDA/NCCL paths were built (KVRL_WITH_CUDA)
  int cuda_devices = 0;           // devices usable by LibTorch in this process
  int cuda_runtime_version = 0;   // e.g. 13000 for 13.0; 0 when not compiled in
  int cuda_driver_version = 0;    // 0 when no driver is installed
  int nccl_version = 0;           // e.g. 22809 for 2.28.9; 0 when not compiled in

  // One line for the log, e.g. "no usable GPU: running on CPU (CUDA runtime 13.0, ...)".
  std::string summary() const;
};

// Never throws: a missing driver or library reads as zero devices.
AcceleratorReport probe_accelerators();

}  // namespace kvrl
