// Bus bandwidth of the learners' collectives, by the nccl-tests definitions: for each
// message size, algbw = bytes / time, and busbw = algbw * 2(n-1)/n for all-reduce and
// busbw = algbw for broadcast, so that busbw is comparable with the link's bandwidth
// whatever the rank count. It times the Communicator the learners use: NcclCommunicator
// with --device cuda (each rank on the GPU of its local rank), MpiCommunicator through
// the host otherwise. Rank 0 prints a table and writes JSON.
//
//   launch/kvrl-mpirun -np 2 build/bench/kvrl_bench_collectives [--device cpu|cuda] [--json PATH]
#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/device_placement.h"
#include "common/mpi_transport.h"
#ifdef KVRL_HAVE_NCCL
#include "common/nccl_communicator.h"
#endif

namespace {

struct Timing {
  int64_t bytes = 0;
  double all_reduce_us = 0;
  double broadcast_us = 0;
};

// Mean microseconds of `operation` over enough repeats to fill ~0.2 s (at least 5),
// the slowest rank's.
template <typename Operation>
double time_us(const c10::Device& device, Operation operation) {
  operation();  // warm-up: buffers, NCCL channels
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
  MPI_Barrier(MPI_COMM_WORLD);
  int repeats = 0;
  const auto start = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (repeats < 5 || elapsed < 0.2) {
    operation();
    ++repeats;
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // Every rank must run the same number of collectives: rank 0's clock decides.
    int go_on = elapsed < 0.2 || repeats < 5;
    MPI_Bcast(&go_on, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (!go_on) break;
  }
  double mean = elapsed / repeats * 1e6;
  double slowest = 0;
  MPI_Allreduce(&mean, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::string device_name = "cpu";
  std::string json_path = "bench/results/collectives_bench.json";
  for (int i = 1; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 == argc) {
      std::fprintf(stderr, "kvrl_bench_collectives: %s needs a value\n", flag.c_str());
      MPI_Finalize();
      return 2;
    }
    if (flag == "--device") {
      device_name = argv[i + 1];
    } else if (flag == "--json") {
      json_path = argv[i + 1];
    } else {
      std::fprintf(stderr, "usage: %s [--device cpu|cuda] [--json PATH]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  if (device_name != "cpu" && device_name != "cuda") {
    std::fprintf(stderr, "kvrl_bench_collectives: --device %s: expected cpu or cuda\n", device_name.c_str());
    MPI_Finalize();
    return 2;
  }
  at::set_num_threads(1);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  c10::Device device(c10::kCPU);
  std::unique_ptr<kvrl::Communicator> communicator;
  std::string transport = "MPI";
  if (device_name == "cuda") {
#ifdef KVRL_HAVE_NCCL
    if (!torch::cuda::is_available()) {
      if (rank == 0) std::fprintf(stderr, "kvrl_bench_collectives: --device cuda, but no GPU is usable here\n");
      MPI_Finalize();
      return 2;
    }
    device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(kvrl::local_rank_from_environment() %
                                                                  static_cast<int>(torch::cuda::device_count())));
    communicator = std::make_unique<kvrl::NcclCommunicator>(MPI_COMM_WORLD, device, kvrl::NcclOptions{});
    transport = "NCCL";
#else
    if (rank == 0) std::fprintf(stderr, "kvrl_bench_collectives: built without NCCL\n");
    MPI_Finalize();
    return 2;
#endif
  } else {
    communicator = std::make_unique<kvrl::MpiCommunicator>(MPI_COMM_WORLD);
  }

  std::vector<Timing> timings;
  for (int64_t bytes = int64_t{4} << 10; bytes <= int64_t{64} << 20; bytes *= 4) {
    std::vector<at::Tensor> buffer = {torch::ones({bytes / 4}, torch::TensorOptions(torch::kFloat).device(device))};
    Timing timing{bytes};
    timing.all_reduce_us = time_us(device, [&] { communicator->all_reduce_mean(buffer); });
    timing.broadcast_us = time_us(device, [&] { communicator->broadcast(buffer, 0); });
    timings.push_back(timing);
  }

  if (rank == 0) {
    const double bus_factor = 2.0 * (size - 1) / size;
    std::printf("%s collectives, %d rank(s) on %s; GB/s (1e9 bytes/s); busbw = algbw * %.2f for all-reduce\n",
                transport.c_str(), size, device.str().c_str(), bus_factor);
    if (size < 2) std::printf("(one rank: no data moves between ranks, so busbw is 0 by definition)\n");
    std::printf("| bytes | all-reduce µs | all-reduce algbw | all-reduce busbw | broadcast µs | broadcast busbw |\n");
    std::printf("|---|---|---|---|---|---|\n");
    std::string rows;
    for (const Timing& t : timings) {
      const double reduce_algbw = t.bytes / t.all_reduce_us / 1e3;
      const double broadcast_algbw = t.bytes / t.broadcast_us / 1e3;
      std::printf("| %lld | %.1f | %.3f | %.3f | %.1f | %.3f |\n", static_cast<long long>(t.bytes), t.all_reduce_us,
                  reduce_algbw, reduce_algbw * bus_factor, t.broadcast_us, size > 1 ? broadcast_algbw : 0.0);
      char row[320];
      std::snprintf(row, sizeof(row),
                    "%s{\"bytes\": %lld, \"all_reduce_us\": %.3f, \"all_reduce_busbw_gbps\": %.4f, "
                    "\"broadcast_us\": %.3f, \"broadcast_busbw_gbps\": %.4f}",
                    rows.empty() ? "" : ", ", static_cast<long long>(t.bytes), t.all_reduce_us,
                    reduce_algbw * bus_factor, t.broadcast_us, size > 1 ? broadcast_algbw : 0.0);
      rows += row;
    }
    std::ofstream(json_path) << "{\"transport\": \"" << transport << "\", \"ranks\": " << size << ", \"device\": \""
                             << device.str() << "\", \"rows\": [" << rows << "]}\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  communicator.reset();
  MPI_Finalize();
  return 0;
}
