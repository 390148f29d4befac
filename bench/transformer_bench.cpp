// Times one cell of the transformer benchmark grid for kvrl's C++ TransformerModule and
// prints it as one JSON object. bench/transformer_bench.py runs it beside TorchRL's
// reference module, cell by cell, with the same protocol, and makes the table.
//
//   kvrl_bench_transformer step   ENVS CONTEXT REPEATS
//   kvrl_bench_transformer window BATCH WINDOW REPEATS
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "common/transformer_module.h"

namespace {

constexpr int64_t kInputSize = 16;
constexpr int64_t kMaxSeqLen = 256;
constexpr int64_t kTimedSteps = 16;  // steps timed per repeat, ending at the context

kvrl::TransformerModule make_module() {
  kvrl::TransformerModuleOptions options;
  options.input_size = kInputSize;
  options.hidden_size = 256;
  options.num_layers = 4;
  options.num_heads = 8;
  options.max_seq_len = kMaxSeqLen;
  return kvrl::TransformerModule(options);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

using Clock = std::chrono::steady_clock;

// Seconds per batched step with `context` steps in every stream's cache.
double time_cached_step(int64_t envs, int64_t context, int64_t repeats) {
  kvrl::TransformerModule module = make_module();
  module.eval();
  const at::Tensor obs = torch::randn({envs, kInputSize});
  const at::Tensor start = torch::ones({envs}, torch::kBool);
  const at::Tensor cont = torch::zeros({envs}, torch::kBool);
  std::vector<double> per_step;
  for (int64_t r = 0; r < repeats + 1; ++r) {
    module.step(obs, start);
    for (int64_t t = 1; t < context - kTimedSteps; ++t) module.step(obs, cont);
    const auto begin = Clock::now();
    for (int64_t t = 0; t < kTimedSteps; ++t) module.step(obs, cont);
    const double seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    if (r > 0) per_step.push_back(seconds / kTimedSteps);  // the first repeat warms up
  }
  return median(per_step);
}

// Seconds per window forward+backward over [batch, window] with two episodes per row.
double time_window(int64_t batch, int64_t window, int64_t repeats) {
  kvrl::TransformerModule module = make_module();
  const at::Tensor obs = torch::randn({batch, window, kInputSize});
  at::Tensor is_init = torch::zeros({batch, window}, torch::kBool);
  is_init.select(1, 0).fill_(true);
  is_init.select(1, window / 2).fill_(true);
  std::vector<double> seconds;
  for (int64_t r = 0; r < repeats + 1; ++r) {
    module.zero_grad();
    const auto begin = Clock::now();
    module.window(obs, is_init).sum().backward();
    if (r > 0) seconds.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return median(seconds);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s step ENVS CONTEXT REPEATS | window BATCH WINDOW REPEATS\n", argv[0]);
    return 2;
  }
  at::set_num_threads(1);
  torch::manual_seed(0);
  const std::string mode = argv[1];
  const int64_t a = std::stoll(argv[2]);
  const int64_t b = std::stoll(argv[3]);
  const int64_t repeats = std::stoll(argv[4]);
  if (mode == "step") {
    if (b < kTimedSteps + 1 || b > kMaxSeqLen) {
      std::fprintf(stderr, "CONTEXT (%lld) must be in [%lld, %lld]\n", static_cast<long long>(b),
                   static_cast<long long>(kTimedSteps + 1), static_cast<long long>(kMaxSeqLen));
      return 2;
    }
    std::printf("{\"mode\": \"step\", \"envs\": %lld, \"context\": %lld, \"seconds\": %.9g}\n",
                static_cast<long long>(a), static_cast<long long>(b), time_cached_step(a, b, repeats));
  } else if (mode == "window") {
    std::printf("{\"mode\": \"window\", \"batch\": %lld, \"window\": %lld, \"seconds\": %.9g}\n",
                static_cast<long long>(a), static_cast<long long>(b), time_window(a, b, repeats));
  } else {
    std::fprintf(stderr, "mode '%s' must be step or window\n", mode.c_str());
    return 2;
  }
  return 0;
}
