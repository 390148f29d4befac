#include "launch/transformer_demo_command.h"

#include <ATen/ops/stack.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "common/comm/accelerator_probe.h"
#include "common/model/transformer_module.h"
#include "common/support/errors.h"
#include "launch/command_line.h"

namespace kvrl {
namespace {

struct DemoArgs {
  int64_t envs = 16;    // concurrent streams
  int64_t steps = 200;  // steps per stream, at most max_seq_len
  int64_t seed = 0;
};

constexpr int64_t kDemoMaxSeqLen = 256;

DemoArgs parse_demo_args(const DemoArguments& arguments) {
  return {parse_count("--envs", arguments.envs, 1, 65536),
          parse_count("--steps", arguments.steps, 1, kDemoMaxSeqLen),
          parse_count("--seed", arguments.seed, 0, int64_t{1} << 62)};
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int run_transformer_demo(const DemoArguments& arguments) {
  const DemoArgs demo = parse_demo_args(arguments);
  TransformerModuleOptions options;
  options.input_size = 8;
  options.hidden_size = 64;
  options.num_layers = 2;
  options.num_heads = 4;
  options.max_seq_len = kDemoMaxSeqLen;  // --steps is at most this
  std::printf("kvrl transformer-demo: %s\n", probe_accelerators().summary().c_str());
  std::printf("  the demo runs on CPU: %lld streams x %lld steps, hidden 64, 2 layers, 4 heads\n",
              static_cast<long long>(demo.envs), static_cast<long long>(demo.steps));
  torch::manual_seed(demo.seed);
  TransformerModule module(options);
  module.eval();

  const at::Tensor observations = torch::randn({demo.envs, demo.steps, 8});
  // Episodes end at random, about every 50 steps; the first step of each stream starts one.
  at::Tensor is_init = torch::rand({demo.envs, demo.steps}) < 0.02;
  is_init.select(1, 0).fill_(true);

  std::vector<at::Tensor> step_outputs;
  const auto step_start = std::chrono::steady_clock::now();
  for (int64_t t = 0; t < demo.steps; ++t) {
    step_outputs.push_back(module.step(observations.select(1, t), is_init.select(1, t)));
  }
  const double step_seconds = seconds_since(step_start);
  const at::Tensor steps = at::stack(step_outputs, /*dim=*/1);

  const auto window_start = std::chrono::steady_clock::now();
  at::Tensor window;
  {
    torch::NoGradGuard no_grad;
    window = module.window(observations, is_init);
  }
  const double window_seconds = seconds_since(window_start);
  const double max_difference = (steps - window).abs().max().item<double>();
  const int64_t episodes = is_init.sum().item<int64_t>();

  std::printf("  cached step : %8.1f env steps/s (%.1f us per batched step)\n",
              static_cast<double>(demo.envs * demo.steps) / step_seconds, 1e6 * step_seconds / demo.steps);
  std::printf("  window      : %8.1f tokens/s over [%lld, %lld] holding %lld episode starts\n",
              static_cast<double>(demo.envs * demo.steps) / window_seconds, static_cast<long long>(demo.envs),
              static_cast<long long>(demo.steps), static_cast<long long>(episodes));
  std::printf("  max |step - window| = %.3g (%s)\n", max_difference,
              max_difference < 1e-4 ? "paths agree" : "MISMATCH");
  return max_difference < 1e-4 ? 0 : 1;
}

}  // namespace kvrl
