// Environment steps per second of kvrl's VectorEnv alone (no policy): uniform random
// actions, precomputed, stepped through `--envs` environments with automatic resets; a
// gym:<id> steps through the Gymnasium bridge. bench/env_throughput.py runs it beside
// Gymnasium's own vector loop on the same task and prints the table; this program prints
// one JSON line. `--threads N` steps the environments on N threads (env.step_threads, in
// lockstep), 0 in the caller's thread.
//
//   kvrl_bench_envs --env NAME [--envs 16] [--steps 20000] [--seed 0] [--threads 0]
#include <chrono>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "actor/env_registry.h"
#include "actor/vector_env.h"

namespace {

struct BenchConfig {
  std::string env;
  int64_t envs = 16;
  int64_t steps = 20000;  // vector steps x envs, in env steps
  uint64_t seed = 0;
  int64_t threads = 0;
};

BenchConfig parse(int argc, char** argv) {
  BenchConfig config;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--env")
      config.env = value;
    else if (key == "--envs")
      config.envs = std::stoll(value);
    else if (key == "--steps")
      config.steps = std::stoll(value);
    else if (key == "--seed")
      config.seed = std::stoull(value);
    else if (key == "--threads")
      config.threads = std::stoll(value);
    else
      throw std::invalid_argument("unknown option " + key +
                                  " (allowed: --env, --envs, --steps, --seed, --threads)");
  }
  if (config.env.empty()) throw std::invalid_argument("--env NAME is required");
  if (config.envs < 1 || config.steps < config.envs)
    throw std::invalid_argument("need --envs >= 1, --steps >= --envs");
  if (config.threads < 0)
    throw std::invalid_argument("--threads " + std::to_string(config.threads) + ": need >= 0");
  return config;
}

// Actions for `vector_steps` steps of every environment, uniform over the action space
// (a box's bounds, or every index of a discrete space).
std::vector<float> random_actions(const kvrl::VectorEnv& env, int64_t vector_steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const kvrl::Space& space = env.action_space();
  const int64_t per_step = env.num_envs() * env.action_size();
  std::vector<float> actions(static_cast<size_t>(vector_steps * per_step));
  for (size_t i = 0; i < actions.size(); ++i) {
    if (space.is_discrete()) {
      actions[i] = static_cast<float>(std::uniform_int_distribution<int64_t>(0, space.n - 1)(rng));
    } else {
      const size_t element = i % static_cast<size_t>(env.action_size());
      actions[i] = std::uniform_real_distribution<float>(space.low[element], space.high[element])(rng);
    }
  }
  return actions;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const BenchConfig config = parse(argc, argv);
    kvrl::EnvironmentRequest request;
    request.name = config.env;
    request.stepping.threads = config.threads;
    const std::unique_ptr<kvrl::VectorEnv> vector = kvrl::make_vector_env(request, config.envs, config.seed);
    kvrl::VectorEnv& env = *vector;
    const int64_t vector_steps = config.steps / config.envs;
    const std::vector<float> actions = random_actions(env, vector_steps, config.seed);
    const size_t per_step = static_cast<size_t>(env.num_envs() * env.action_size());
    env.reset();
    const auto start = std::chrono::steady_clock::now();
    for (int64_t t = 0; t < vector_steps; ++t) env.step({actions.data() + t * per_step, per_step});
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf(
        "{\"env\": \"%s\", \"envs\": %lld, \"threads\": %lld, \"env_steps\": %lld, \"seconds\": %.6f, "
        "\"steps_per_s\": %.1f}\n",
        config.env.c_str(), static_cast<long long>(config.envs), static_cast<long long>(config.threads),
        static_cast<long long>(vector_steps) * config.envs, seconds,
        static_cast<double>(vector_steps * config.envs) / seconds);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kvrl_bench_envs: %s\n", error.what());
    return 2;
  }
}
