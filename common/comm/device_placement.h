// Which device a rank computes on. The config asks ("auto", "cpu", "cuda" or "cuda:N",
// per role); the launcher's local rank spreads the ranks of a node over its GPUs; and a
// rank without a usable GPU runs on CPU and says why, instead of failing.
#pragma once

#include <c10/core/Device.h>

#include <functional>
#include <string>

namespace kvrl {

struct DeviceRequest {
  enum class Kind { kAuto, kCpu, kCuda };
  Kind kind = Kind::kAuto;
  int index = -1;  // kCuda: the GPU pinned by "cuda:N"; -1 = chosen by local rank

  // Throws InvalidArgumentError naming `text` and the allowed forms.
  static DeviceRequest parse(const std::string& text);
};

struct DeviceChoice {
  c10::Device device = c10::Device(c10::kCPU);
  bool fell_back = false;  // a GPU was possible or asked for, but none is usable
  std::string reason;      // one line for the log
};

// The rank's index among the ranks of its node, from the first launcher variable set:
// OMPI_COMM_WORLD_LOCAL_RANK (Open MPI), MPI_LOCALRANKID (MPICH), SLURM_LOCALID (srun),
// LOCAL_RANK; -1 when none is.
int local_rank_from_environment(const std::function<const char*(const char*)>& lookup = std::getenv);

// auto and cuda: GPU (local_rank mod cuda_devices) when there is one; cuda:N: GPU N when
// it exists; cpu: the CPU. Every other case falls back to the CPU with the reason.
DeviceChoice choose_device(const DeviceRequest& request, int local_rank, int cuda_devices);

}  // namespace kvrl
