// Actor and learner throughput on CPU and, where one is usable, on a GPU, side by side in
// one run: the policy of the main job (configs/cartpole_ppo.yaml's model) stepping B
// environments' caches, and the learner's window forward+backward. Prints a table and
// writes JSON. scripts/device-check.sh runs it on a GPU machine.
//
//   kvrl_bench_device [--json PATH] [--steps N]
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/model/actor_critic.h"

namespace {

using Clock = std::chrono::steady_clock;

kvrl::ActorCriticOptions main_job_policy() {
  kvrl::ActorCriticOptions options;
  options.transformer.input_size = 4;
  options.transformer.hidden_size = 64;
  options.transformer.num_layers = 2;
  options.transformer.num_heads = 4;
  options.transformer.max_seq_len = 512;
  options.num_outputs = 2;
  return options;
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Microseconds per cached step of `envs` streams, timed over `steps` steps after a
// context of 64 steps (the first steps are warm-up).
double actor_step_us(const c10::Device& device, int64_t envs, int64_t steps) {
  kvrl::ActorCritic policy(main_job_policy());
  policy.to(device);
  torch::NoGradGuard no_grad;
  at::Generator generator =
      device.is_cuda() ? at::globalContext().defaultGenerator(device) : at::detail::createCPUGenerator(1);
  const at::Tensor observations = torch::randn({envs, 4}, device);
  const at::Tensor first = torch::ones({envs}, torch::TensorOptions(torch::kBool).device(device));
  const at::Tensor rest = torch::zeros({envs}, torch::TensorOptions(torch::kBool).device(device));
  for (int64_t t = 0; t < 64; ++t) policy.act(observations, t == 0 ? first : rest, generator);
  synchronize(device);
  const auto start = Clock::now();
  for (int64_t t = 0; t < steps; ++t) {
    const kvrl::PolicyStep step = policy.act(observations, rest, generator);
    // What the actor ships: one device-to-host copy of the step's records.
    at::cat({step.actions, step.log_probs.unsqueeze(1), step.values.unsqueeze(1)}, 1).to(torch::kCPU);
  }
  synchronize(device);
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / static_cast<double>(steps);
}

// Tokens per second of the learner's window forward and backward on [rows, width] windows.
double learner_tokens_per_s(const c10::Device& device, int64_t rows, int64_t width, int64_t repeats) {
  kvrl::ActorCritic policy(main_job_policy());
  policy.to(device);
  const at::Tensor observations = torch::randn({rows, width, 4}, device);
  at::Tensor is_init = torch::zeros({rows, width}, torch::TensorOptions(torch::kBool).device(device));
  is_init.select(1, 0).fill_(true);
  auto pass = [&] {
    const kvrl::PolicyWindow window = policy.evaluate(observations, is_init);
    (window.values.sum() + window.policy.sum()).backward();
  };
  pass();
  synchronize(device);
  const auto start = Clock::now();
  for (int64_t i = 0; i < repeats; ++i) pass();
  synchronize(device);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(rows * width * repeats) / seconds;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int64_t steps = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc)
      json_path = argv[++i];
    else if (arg == "--steps" && i + 1 < argc)
      steps = std::stoll(argv[++i]);
    else {
      std::fprintf(stderr, "usage: kvrl_bench_device [--json PATH] [--steps N]\n");
      return 2;
    }
  }
  at::set_num_threads(1);  // as a rank runs: one intra-op thread
  std::vector<c10::Device> devices = {c10::Device(c10::kCPU)};
  if (torch::cuda::is_available())
    devices.emplace_back(c10::kCUDA, 0);
  else
    std::printf("no usable GPU: CPU rows only\n");
  std::string json = "{\"actor_step\": [";
  std::printf("\nactor cached step (hidden 64, 2 layers, context 64-%lld)\n",
              static_cast<long long>(steps) + 64);
  std::printf("| envs | device | us/step | env steps/s | vs CPU |\n|---|---|---|---|---|\n");
  bool first_row = true;
  for (int64_t envs : {64, 256, 1024, 4096}) {
    double cpu_us = 0;
    for (const c10::Device& device : devices) {
      const double us = actor_step_us(device, envs, steps);
      if (device.is_cpu()) cpu_us = us;
      const double rate = static_cast<double>(envs) * 1e6 / us;
      std::printf("| %lld | %s | %.0f | %.0f | %.2fx |\n", static_cast<long long>(envs), device.str().c_str(),
                  us, rate, cpu_us / us);
      char row[256];
      std::snprintf(
          row, sizeof(row),
          "%s{\"envs\": %lld, \"device\": \"%s\", \"us_per_step\": %.1f, \"env_steps_per_s\": %.1f}",
          first_row ? "" : ", ", static_cast<long long>(envs), device.str().c_str(), us, rate);
      json += row;
      first_row = false;
    }
  }
  json += "], \"learner_window\": [";
  std::printf(
      "\nlearner window forward+backward ([32, 512] windows)\n| device | tokens/s | vs CPU "
      "|\n|---|---|---|\n");
  double cpu_rate = 0;
  first_row = true;
  for (const c10::Device& device : devices) {
    const double rate = learner_tokens_per_s(device, 32, 512, device.is_cpu() ? 2 : 20);
    if (device.is_cpu()) cpu_rate = rate;
    std::printf("| %s | %.0f | %.2fx |\n", device.str().c_str(), rate, rate / cpu_rate);
    char row[160];
    std::snprintf(row, sizeof(row), "%s{\"device\": \"%s\", \"tokens_per_s\": %.1f}", first_row ? "" : ", ",
                  device.str().c_str(), rate);
    json += row;
    first_row = false;
  }
  json += "]}\n";
  std::printf(
      "\nall-reduce / broadcast bus bandwidth: needs 2 or more GPUs, %s\n",
      torch::cuda::device_count() >= 2 ? "run nccl-tests-style ranks (not built yet)" : "not measured here");
  if (!json_path.empty()) std::ofstream(json_path) << json;
  return 0;
}
