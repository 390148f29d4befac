#include "common/comm/device_placement.h"

#include <cstdlib>

#include "common/support/errors.h"

namespace kvrl {

DeviceRequest DeviceRequest::parse(const std::string& text) {
  DeviceRequest request;
  if (text == "auto") return request;
  if (text == "cpu") {
    request.kind = Kind::kCpu;
    return request;
  }
  request.kind = Kind::kCuda;
  if (text == "cuda") return request;
  const std::string prefix = "cuda:";
  if (text.rfind(prefix, 0) == 0 && text.size() > prefix.size() && text.size() <= prefix.size() + 4 &&
      text.find_first_not_of("0123456789", prefix.size()) == std::string::npos) {
    request.index = std::stoi(text.substr(prefix.size()));
    return request;
  }
  throw InvalidArgumentError("device '" + text + "' must be auto, cpu, cuda or cuda:N (N a GPU index)");
}

int local_rank_from_environment(const std::function<const char*(const char*)>& lookup) {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID", "LOCAL_RANK"}) {
    const char* value = lookup(name);
    if (value && *value) {
      char* end = nullptr;
      const long rank = std::strtol(value, &end, 10);
      if (*end == '\0' && rank >= 0) return static_cast<int>(rank);
    }
  }
  return -1;
}

DeviceChoice choose_device(const DeviceRequest& request, int local_rank, int cuda_devices) {
  DeviceChoice choice;
  using Kind = DeviceRequest::Kind;
  if (request.kind == Kind::kCpu) {
    choice.reason = "running on CPU, as configured";
    return choice;
  }
  if (cuda_devices <= 0) {
    choice.fell_back = true;
    choice.reason = std::string("no usable GPU") +
                    (request.kind == Kind::kCuda ? " although the config asks for one" : "") +
                    ": running on CPU";
    return choice;
  }
  if (request.index >= 0) {
    if (request.index >= cuda_devices) {
      choice.fell_back = true;
      choice.reason = "cuda:" + std::to_string(request.index) + " is configured but only " +
                      std::to_string(cuda_devices) + " GPU(s) are usable: running on CPU";
      return choice;
    }
    choice.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(request.index));
    choice.reason = "running on cuda:" + std::to_string(request.index) + ", as configured";
    return choice;
  }
  const int index = (local_rank < 0 ? 0 : local_rank) % cuda_devices;
  choice.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  choice.reason = "running on cuda:" + std::to_string(index) + " (local rank " + std::to_string(local_rank) +
                  " of a node with " + std::to_string(cuda_devices) + " GPU(s))";
  return choice;
}

}  // namespace kvrl
