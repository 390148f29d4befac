// Bus bandwidth of the learners' collectives, by the nccl-tests definitions: for each
// message size, algbw = bytes / time, and busbw = algbw * 2(n-1)/n for all-reduce and
// busbw = algbw for broadcast, so that busbw is comparable with the link's bandwidth
// whatever the rank count. It times the Communicator the learners use: NcclCommunicator
// with --device cuda (each rank on the GPU of its local rank), MpiCommunicator through
// the host otherwise. Rank 0 prints a table and writes JSON.
//
// A second table times one learner step (window forward, backward and the gradient
// mean, no optimizer) of a transformer ActorCritic, with the gradients averaged after
// backward and overlapped with it (GradientReducer), side by side, for a few bucket sizes.
//
//   launch/kvrl-mpirun -np 2 build/bench/kvrl_bench_collectives [--device cpu|cuda] [--json PATH]
//       [--hidden N] [--layers N] [--window T]
#include <ATen/Parallel.h>
#include <mpi.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/comm/device_placement.h"
#include "common/comm/mpi_communicator.h"
#include "common/model/actor_critic.h"
#include "learner/gradient_reducer.h"
#ifdef KVRL_HAVE_NCCL
#include "common/comm/nccl_communicator.h"
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
  // Only rank 0's vote ends the loop: a condition on each rank's own clock let the ranks
  // leave at different repetitions, out of step (MPI_ERR_TRUNCATE across hosts).
  while (true) {
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

struct OverlapTiming {
  int64_t bucket_bytes = 0;
  int64_t buckets = 0;
  double after_backward_ms = 0;
  double overlapped_ms = 0;
  double during_backward = 0;  // share of buckets started inside backward
};

struct OverlapModel {
  int64_t hidden = 256;
  int64_t layers = 4;
  int64_t window = 128;  // tokens per row; 8 rows
};

// One learner step's forward, backward and gradient mean, averaged after backward and
// overlapped with it, for bucket sizes from 256 KiB to everything in one bucket.
std::vector<OverlapTiming> time_overlap(const c10::Device& device,
                                        const std::shared_ptr<kvrl::Communicator>& communicator,
                                        const OverlapModel& shape, int rank, int64_t* parameter_bytes) {
  kvrl::ActorCriticOptions options;
  options.transformer.input_size = 8;
  options.transformer.hidden_size = shape.hidden;
  options.transformer.num_layers = shape.layers;
  options.transformer.num_heads = 4;
  options.transformer.max_seq_len = shape.window;
  options.num_outputs = 4;
  torch::manual_seed(0);
  auto model = std::make_shared<kvrl::ActorCritic>(options);
  model->to(device);
  std::vector<at::Tensor> parameters = model->parameters();
  *parameter_bytes = 0;
  for (const auto& p : parameters) *parameter_bytes += p.numel() * 4;
  torch::manual_seed(1 + rank);  // learners see different data
  const auto on_device = torch::TensorOptions().device(device);
  const at::Tensor observations = torch::randn({8, shape.window, 8}, on_device);
  at::Tensor is_init = torch::zeros({8, shape.window}, on_device.dtype(torch::kBool));
  is_init.select(1, 0).fill_(true);
  auto loss = [&] {
    const kvrl::PolicyWindow out = model->evaluate(observations, is_init);
    return out.policy.pow(2).mean() + out.values.pow(2).mean();
  };
  auto zero = [&] {
    for (auto& p : parameters) p.mutable_grad() = at::Tensor();
  };
  std::vector<OverlapTiming> timings;
  for (int64_t bucket_bytes : {int64_t{256} << 10, int64_t{1} << 20, int64_t{4} << 20, *parameter_bytes}) {
    OverlapTiming timing;
    timing.bucket_bytes = bucket_bytes;
    kvrl::MpiCommunicator* mpi = dynamic_cast<kvrl::MpiCommunicator*>(communicator.get());
    // The blocking path buckets as the communicator was built; rebuild an MPI one per size.
    std::shared_ptr<kvrl::Communicator> blocking =
        mpi ? std::make_shared<kvrl::MpiCommunicator>(MPI_COMM_WORLD, bucket_bytes) : communicator;
    timing.after_backward_ms = time_us(device,
                                       [&] {
                                         zero();
                                         loss().backward();
                                         std::vector<at::Tensor> grads;
                                         grads.reserve(parameters.size());
                                         for (auto& p : parameters) grads.push_back(p.grad());
                                         blocking->all_reduce_mean(grads);
                                       }) /
                               1e3;
    kvrl::GradientReducer reducer(parameters, communicator, bucket_bytes);
    timing.buckets = static_cast<int64_t>(reducer.bucket_count());
    int64_t steps = 0, started_during_backward = 0;
    timing.overlapped_ms = time_us(device,
                                   [&] {
                                     zero();
                                     reducer.prepare();
                                     loss().backward();
                                     reducer.finish();
                                     ++steps;
                                     started_during_backward +=
                                         static_cast<int64_t>(reducer.buckets_started_during_backward());
                                   }) /
                           1e3;
    timing.during_backward =
        static_cast<double>(started_during_backward) / static_cast<double>(steps * timing.buckets);
    timings.push_back(timing);
  }
  return timings;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  std::string device_name = "cpu";
  std::string json_path = "bench/results/collectives_bench.json";
  OverlapModel shape;
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
    } else if (flag == "--hidden" || flag == "--layers" || flag == "--window") {
      const long long value = std::atoll(argv[i + 1]);
      if (value < 1 || value > 65536) {
        std::fprintf(stderr, "kvrl_bench_collectives: %s %s: expected an integer in [1, 65536]\n",
                     flag.c_str(), argv[i + 1]);
        MPI_Finalize();
        return 2;
      }
      (flag == "--hidden" ? shape.hidden : flag == "--layers" ? shape.layers : shape.window) = value;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--device cpu|cuda] [--json PATH] [--hidden N] [--layers N] [--window T]\n",
                   argv[0]);
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
  std::shared_ptr<kvrl::Communicator> communicator;
  std::string transport = "MPI";
  if (device_name == "cuda") {
#ifdef KVRL_HAVE_NCCL
    if (!torch::cuda::is_available()) {
      if (rank == 0)
        std::fprintf(stderr, "kvrl_bench_collectives: --device cuda, but no GPU is usable here\n");
      MPI_Finalize();
      return 2;
    }
    device =
        c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(kvrl::local_rank_from_environment() %
                                                              static_cast<int>(torch::cuda::device_count())));
    communicator = std::make_shared<kvrl::NcclCommunicator>(MPI_COMM_WORLD, device, kvrl::NcclOptions{});
    transport = "NCCL";
#else
    if (rank == 0) std::fprintf(stderr, "kvrl_bench_collectives: built without NCCL\n");
    MPI_Finalize();
    return 2;
#endif
  } else {
    communicator = std::make_shared<kvrl::MpiCommunicator>(MPI_COMM_WORLD);
  }

  std::vector<Timing> timings;
  for (int64_t bytes = int64_t{4} << 10; bytes <= int64_t{64} << 20; bytes *= 4) {
    std::vector<at::Tensor> buffer = {
        torch::ones({bytes / 4}, torch::TensorOptions(torch::kFloat).device(device))};
    Timing timing{bytes};
    timing.all_reduce_us = time_us(device, [&] { communicator->all_reduce_mean(buffer); });
    timing.broadcast_us = time_us(device, [&] { communicator->broadcast(buffer, 0); });
    timings.push_back(timing);
  }
  int64_t parameter_bytes = 0;
  const std::vector<OverlapTiming> overlap =
      time_overlap(device, communicator, shape, rank, &parameter_bytes);

  if (rank == 0) {
    const double bus_factor = 2.0 * (size - 1) / size;
    std::printf("%s collectives, %d rank(s) on %s; GB/s (1e9 bytes/s); busbw = algbw * %.2f for all-reduce\n",
                transport.c_str(), size, device.str().c_str(), bus_factor);
    if (size < 2) std::printf("(one rank: no data moves between ranks, so busbw is 0 by definition)\n");
    std::printf(
        "| bytes | all-reduce µs | all-reduce algbw | all-reduce busbw | broadcast µs | broadcast busbw |\n");
    std::printf("|---|---|---|---|---|---|\n");
    std::string rows;
    for (const Timing& t : timings) {
      const double reduce_algbw = t.bytes / t.all_reduce_us / 1e3;
      const double broadcast_algbw = t.bytes / t.broadcast_us / 1e3;
      std::printf("| %lld | %.1f | %.3f | %.3f | %.1f | %.3f |\n", static_cast<long long>(t.bytes),
                  t.all_reduce_us, reduce_algbw, reduce_algbw * bus_factor, t.broadcast_us,
                  size > 1 ? broadcast_algbw : 0.0);
      char row[320];
      std::snprintf(row, sizeof(row),
                    "%s{\"bytes\": %lld, \"all_reduce_us\": %.3f, \"all_reduce_busbw_gbps\": %.4f, "
                    "\"broadcast_us\": %.3f, \"broadcast_busbw_gbps\": %.4f}",
                    rows.empty() ? "" : ", ", static_cast<long long>(t.bytes), t.all_reduce_us,
                    reduce_algbw * bus_factor, t.broadcast_us, size > 1 ? broadcast_algbw : 0.0);
      rows += row;
    }
    std::printf(
        "\nOne learner step (window forward + backward + gradient mean, no optimizer) of a transformer "
        "ActorCritic, hidden %lld, %lld layers, 8 x %lld tokens, %.2f MB of gradients; ms, slowest rank\n",
        static_cast<long long>(shape.hidden), static_cast<long long>(shape.layers),
        static_cast<long long>(shape.window), parameter_bytes / 1e6);
    std::printf(
        "| bucket bytes | buckets | mean after backward ms | overlapped ms | speed-up | started in backward "
        "|\n");
    std::printf("|---|---|---|---|---|---|\n");
    std::string overlap_rows;
    for (const OverlapTiming& t : overlap) {
      std::printf("| %lld | %lld | %.2f | %.2f | %.2fx | %.0f%% |\n", static_cast<long long>(t.bucket_bytes),
                  static_cast<long long>(t.buckets), t.after_backward_ms, t.overlapped_ms,
                  t.after_backward_ms / t.overlapped_ms, 100 * t.during_backward);
      char row[320];
      std::snprintf(row, sizeof(row),
                    "%s{\"bucket_bytes\": %lld, \"buckets\": %lld, \"after_backward_ms\": %.3f, "
                    "\"overlapped_ms\": %.3f, \"started_in_backward\": %.3f}",
                    overlap_rows.empty() ? "" : ", ", static_cast<long long>(t.bucket_bytes),
                    static_cast<long long>(t.buckets), t.after_backward_ms, t.overlapped_ms,
                    t.during_backward);
      overlap_rows += row;
    }
    std::ofstream(json_path) << "{\"transport\": \"" << transport << "\", \"ranks\": " << size
                             << ", \"device\": \"" << device.str() << "\", \"rows\": [" << rows
                             << "], \"overlap\": {\"hidden\": " << shape.hidden
                             << ", \"layers\": " << shape.layers << ", \"window\": " << shape.window
                             << ", \"gradient_bytes\": " << parameter_bytes << ", \"rows\": [" << overlap_rows
                             << "]}}\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  communicator.reset();
  MPI_Finalize();
  return 0;
}
