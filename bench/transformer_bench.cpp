// Times one cell of the transformer benchmark grid for kvrl's C++ TransformerModule and
// prints it as one JSON object. bench/transformer_bench.py runs it beside TorchRL's
// reference module, cell by cell, with the same protocol, and makes the table.
//
//   kvrl_bench_transformer step   ENVS CONTEXT REPEATS [options]
//   kvrl_bench_transformer window BATCH WINDOW REPEATS [options]
// options: --device cpu|cuda (default cpu), --dtype float32|bfloat16 (autocast; default
// float32), --max-seq-len N (default 256), --cuda-graphs 0|1 (the cached step on CUDA;
// default 1). On a GPU every timing ends with a device synchronisation.
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/model/autocast_scope.h"
#include "common/model/transformer_module.h"

namespace {

constexpr int64_t kInputSize = 16;
constexpr int64_t kTimedSteps = 16;  // steps timed per repeat, ending at the context

struct BenchOptions {
  c10::Device device = c10::Device(c10::kCPU);
  bool bfloat16 = false;
  int64_t max_seq_len = 256;
  bool cuda_graphs = true;
};

kvrl::TransformerModule make_module(const BenchOptions& bench) {
  kvrl::TransformerModuleOptions options;
  options.input_size = kInputSize;
  options.hidden_size = 256;
  options.num_layers = 4;
  options.num_heads = 8;
  options.max_seq_len = bench.max_seq_len;
  options.cuda_graphs = bench.cuda_graphs;
  options.warn = [](const std::string& message) { std::fprintf(stderr, "warning: %s\n", message.c_str()); };
  return kvrl::TransformerModule(options, bench.device);
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

using Clock = std::chrono::steady_clock;

// Seconds per batched step with `context` steps in every stream's cache.
double time_cached_step(const BenchOptions& bench, int64_t envs, int64_t context, int64_t repeats) {
  kvrl::TransformerModule module = make_module(bench);
  module.eval();
  const auto on_device = torch::TensorOptions().device(bench.device);
  const at::Tensor obs = torch::randn({envs, kInputSize}, on_device);
  const at::Tensor start = torch::ones({envs}, on_device.dtype(torch::kBool));
  const at::Tensor cont = torch::zeros({envs}, on_device.dtype(torch::kBool));
  const kvrl::AutocastScope autocast(bench.device.type(), at::kBFloat16, bench.bfloat16);
  torch::NoGradGuard no_grad;
  std::vector<double> per_step;
  for (int64_t r = 0; r < repeats + 1; ++r) {
    module.step(obs, start);
    for (int64_t t = 1; t < context - kTimedSteps; ++t) module.step(obs, cont);
    synchronize(bench.device);
    const auto begin = Clock::now();
    for (int64_t t = 0; t < kTimedSteps; ++t) module.step(obs, cont);
    synchronize(bench.device);
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    if (r > 0) per_step.push_back(seconds / kTimedSteps);  // the first repeat warms up
  }
  return median(per_step);
}

// Seconds per window forward+backward over [batch, window] with two episodes per row.
double time_window(const BenchOptions& bench, int64_t batch, int64_t window, int64_t repeats) {
  kvrl::TransformerModule module = make_module(bench);
  const auto on_device = torch::TensorOptions().device(bench.device);
  const at::Tensor obs = torch::randn({batch, window, kInputSize}, on_device);
  at::Tensor is_init = torch::zeros({batch, window}, on_device.dtype(torch::kBool));
  is_init.select(1, 0).fill_(true);
  is_init.select(1, window / 2).fill_(true);
  std::vector<double> seconds;
  for (int64_t r = 0; r < repeats + 1; ++r) {
    module.zero_grad();
    synchronize(bench.device);
    const auto begin = Clock::now();
    {
      const kvrl::AutocastScope autocast(bench.device.type(), at::kBFloat16, bench.bfloat16);
      at::Tensor loss = module.window(obs, is_init).sum().to(at::kFloat);
      loss.backward();
    }
    synchronize(bench.device);
    if (r > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return median(seconds);
}

// Reads the options after the positional arguments; returns nullopt after printing why.
std::optional<BenchOptions> parse_options(int argc, char** argv) {
  BenchOptions bench;
  for (int i = 5; i < argc; i += 2) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s needs a value\n", flag.c_str());
      return std::nullopt;
    }
    const std::string value = argv[i + 1];
    if (flag == "--device" && (value == "cpu" || value == "cuda")) {
      bench.device = value == "cpu" ? c10::Device(c10::kCPU) : c10::Device(c10::kCUDA, 0);
    } else if (flag == "--dtype" && (value == "float32" || value == "bfloat16")) {
      bench.bfloat16 = value == "bfloat16";
    } else if (flag == "--max-seq-len" && !value.empty() &&
               value.find_first_not_of("0123456789") == std::string::npos && value.size() < 10 &&
               std::stoll(value) > kTimedSteps) {
      bench.max_seq_len = std::stoll(value);
    } else if (flag == "--cuda-graphs" && (value == "0" || value == "1")) {
      bench.cuda_graphs = value == "1";
    } else {
      std::fprintf(
          stderr,
          "bad option %s %s: expected --device cpu|cuda, --dtype float32|bfloat16, --max-seq-len N > %lld, "
          "--cuda-graphs 0|1\n",
          flag.c_str(), value.c_str(), static_cast<long long>(kTimedSteps));
      return std::nullopt;
    }
  }
  if (bench.device.is_cuda() && !torch::cuda::is_available()) {
    std::fprintf(stderr, "--device cuda: no usable CUDA device\n");
    return std::nullopt;
  }
  return bench;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc % 2 == 0) {
    std::fprintf(stderr,
                 "usage: %s step ENVS CONTEXT REPEATS | window BATCH WINDOW REPEATS [--device D] "
                 "[--dtype T] [--max-seq-len N] [--cuda-graphs 0|1]\n",
                 argv[0]);
    return 2;
  }
  const std::optional<BenchOptions> bench = parse_options(argc, argv);
  if (!bench) return 2;
  at::set_num_threads(1);
  torch::manual_seed(0);
  const std::string mode = argv[1];
  const int64_t a = std::stoll(argv[2]);
  const int64_t b = std::stoll(argv[3]);
  const int64_t repeats = std::stoll(argv[4]);
  if (mode == "step") {
    if (b < kTimedSteps + 1 || b > bench->max_seq_len) {
      std::fprintf(stderr, "CONTEXT (%lld) must be in [%lld, %lld] (--max-seq-len)\n",
                   static_cast<long long>(b), static_cast<long long>(kTimedSteps) + 1,
                   static_cast<long long>(bench->max_seq_len));
      return 2;
    }
    std::printf("{\"mode\": \"step\", \"envs\": %lld, \"context\": %lld, \"seconds\": %.9g}\n",
                static_cast<long long>(a), static_cast<long long>(b),
                time_cached_step(*bench, a, b, repeats));
  } else if (mode == "window") {
    std::printf("{\"mode\": \"window\", \"batch\": %lld, \"window\": %lld, \"seconds\": %.9g}\n",
                static_cast<long long>(a), static_cast<long long>(b), time_window(*bench, a, b, repeats));
  } else {
    std::fprintf(stderr, "mode '%s' must be step or window\n", mode.c_str());
    return 2;
  }
  return 0;
}
