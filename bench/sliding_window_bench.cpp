// The actor's cached step over a long episode: a sliding window of W steps (rotary
// positions, a ring of W cache slots per stream) against the whole context (the segment
// policy's cache grows with the episode up to max_seq_len). For each episode position it
// times a window of steps there and reads the cache's bytes and the process's resident
// memory, so a flat cost and flat memory show as ratios near 1.0 between step 100 and step
// 10 000. Prints a table and writes JSON.
//
//   kvrl_bench_sliding [--out FILE] [--window 64] [--streams 16] [--steps 10000] [--repeats 3]
#include <ATen/Parallel.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "common/model/causal_transformer.h"
#include "common/model/transformer_module.h"

namespace {

constexpr int64_t kInputSize = 16;
constexpr int64_t kTimedSteps = 32;  // steps timed at each probe position

struct BenchConfig {
  int64_t window = 64;
  int64_t streams = 16;
  int64_t steps = 10000;
  int64_t repeats = 3;
  std::string out;
};

struct Probe {
  int64_t position = 0;
  double step_us = 0;
  double cache_mib = 0;
  double rss_mib = 0;
};

double resident_mib() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      double kib = 0;
      status >> kib;
      return kib / 1024.0;
    }
    status.ignore(1 << 12, '\n');
  }
  return 0;
}

kvrl::TransformerModule make_module(int64_t window, int64_t max_seq_len) {
  kvrl::TransformerModuleOptions options;
  options.input_size = kInputSize;
  options.hidden_size = 64;
  options.num_layers = 2;
  options.num_heads = 4;
  options.max_seq_len = max_seq_len;
  options.positions = kvrl::PositionEncoding::kRotary;
  options.attention_window = window;
  return kvrl::TransformerModule(options);
}

double cache_mib(const kvrl::TransformerModule& module, int64_t streams, int64_t window,
                 int64_t max_seq_len) {
  const auto& backbone = dynamic_cast<const kvrl::CausalTransformer&>(module.transformer());
  const int64_t slots = window > 0 ? window : max_seq_len;
  const int64_t floats =
      2 * streams * backbone.num_layers() * backbone.num_heads() * slots * backbone.head_dim();
  return static_cast<double>(floats) * 4.0 / (1 << 20);
}

// Steps one episode per stream to each probe position, timing kTimedSteps steps there.
std::vector<Probe> run_episode(int64_t window, int64_t max_seq_len, const std::vector<int64_t>& probes,
                               const BenchConfig& config) {
  kvrl::TransformerModule module = make_module(window, max_seq_len);
  torch::NoGradGuard no_grad;
  const at::Tensor features = torch::randn({config.streams, kInputSize});
  const at::Tensor start = torch::ones({config.streams}, torch::kBool);
  const at::Tensor go_on = torch::zeros({config.streams}, torch::kBool);
  std::vector<Probe> out;
  int64_t position = 0;
  for (int64_t probe : probes) {
    while (position < probe) module.step(features, position++ == 0 ? start : go_on);
    const auto begin = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < kTimedSteps; ++i) module.step(features, position++ == 0 ? start : go_on);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    out.push_back({probe, seconds / kTimedSteps * 1e6, cache_mib(module, config.streams, window, max_seq_len),
                   resident_mib()});
  }
  return out;
}

BenchConfig parse(int argc, char** argv) {
  BenchConfig config;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const std::string value = argv[i + 1];
    if (key == "--out")
      config.out = value;
    else if (key == "--window")
      config.window = std::stoll(value);
    else if (key == "--streams")
      config.streams = std::stoll(value);
    else if (key == "--steps")
      config.steps = std::stoll(value);
    else if (key == "--repeats")
      config.repeats = std::stoll(value);
    else
      throw std::invalid_argument("unknown option " + key +
                                  " (--out, --window, --streams, --steps, --repeats)");
  }
  return config;
}

int run(const BenchConfig& config) {
  const std::vector<int64_t> probes{100, 1000, config.steps / 2, config.steps};
  const int64_t full_context = config.steps + kTimedSteps + 1;
  struct Row {
    std::string name;
    std::vector<Probe> probes;
  };
  std::vector<Row> rows{{"sliding W=" + std::to_string(config.window), {}}, {"whole context", {}}};
  // Alternate the two settings each repeat, keeping each probe's fastest time.
  for (int64_t repeat = 0; repeat < config.repeats; ++repeat) {
    for (Row& row : rows) {
      const bool sliding = row.name != "whole context";
      std::vector<Probe> run =
          run_episode(sliding ? config.window : 0, sliding ? config.window : full_context, probes, config);
      if (row.probes.empty()) row.probes = run;
      for (size_t i = 0; i < run.size(); ++i) {
        row.probes[i].step_us = std::min(row.probes[i].step_us, run[i].step_us);
        row.probes[i].rss_mib = std::max(row.probes[i].rss_mib, run[i].rss_mib);
      }
    }
  }
  std::printf("cached step, %lld streams, hidden 64, 2 layers, 4 heads, rotary; best of %lld\n",
              static_cast<long long>(config.streams), static_cast<long long>(config.repeats));
  std::printf("%-16s %10s %12s %12s %10s %16s\n", "setting", "position", "step (us)", "cache (MiB)",
              "RSS (MiB)", "step / at 100");
  std::string json = "{\"streams\": " + std::to_string(config.streams) + ", \"rows\": [";
  for (const Row& row : rows) {
    for (const Probe& p : row.probes) {
      const double ratio = p.step_us / row.probes.front().step_us;
      std::printf("%-16s %10lld %12.1f %12.2f %10.1f %15.2fx\n", row.name.c_str(),
                  static_cast<long long>(p.position), p.step_us, p.cache_mib, p.rss_mib, ratio);
      json +=
          std::string(json.back() == '[' ? "" : ", ") + "{\"setting\": \"" + row.name +
          "\", \"position\": " + std::to_string(p.position) + ", \"step_us\": " + std::to_string(p.step_us) +
          ", \"cache_mib\": " + std::to_string(p.cache_mib) + ", \"rss_mib\": " + std::to_string(p.rss_mib) +
          ", \"ratio_to_first\": " + std::to_string(ratio) + "}";
    }
  }
  json += "]}\n";
  if (!config.out.empty()) std::ofstream(config.out) << json;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    at::set_num_threads(1);
    torch::manual_seed(0);
    return run(parse(argc, argv));
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kvrl_bench_sliding: %s\n", error.what());
    return 2;
  }
}
