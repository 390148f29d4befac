// Times the learner's window forward+backward on one packing, with attention that follows
// the episodes (common/model/window_attention.h) and as one whole-window call, and prints
// one JSON object. bench/window_attention.py runs it beside TorchRL's reference on packings drawn
// as in training and makes the table.
//
//   kvrl_bench_window_attention ROWS_FILE REPEATS HIDDEN LAYERS HEADS INPUT MAX_SEQ_LEN [TRACE_PREFIX]
// ROWS_FILE: one line per window row, the token counts of the episodes packed in it
// (each starts a context); rows shorter than the fullest end in padding. With
// TRACE_PREFIX, one more forward+backward of each runs under LibTorch's profiler and its
// ops go to TRACE_PREFIX-kvrl.trace and TRACE_PREFIX-whole.trace (chrome://tracing format).
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/model/episode_masks.h"
#include "common/model/transformer_module.h"
#include "common/model/window_attention.h"

namespace {

struct ModelShape {
  int64_t hidden = 0, layers = 0, heads = 0, input = 0, max_seq_len = 0;
};

// is_init [rows, width]: each episode's first token, and every padding token. The width is
// the fullest row's, as the learner cuts its minibatch rows (WindowRows).
at::Tensor read_rows(const std::string& path, int64_t max_seq_len) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<std::vector<int64_t>> rows;
  int64_t width = 0;
  for (std::string line; std::getline(in, line);) {
    std::istringstream tokens(line);
    rows.emplace_back();
    int64_t used = 0;
    for (int64_t length = 0; tokens >> length; used += length) {
      if (length <= 0) throw std::runtime_error("bad episode length in: " + line);
      rows.back().push_back(length);
    }
    if (used > max_seq_len) throw std::runtime_error("row longer than MAX_SEQ_LEN: " + line);
    width = std::max(width, used);
  }
  if (rows.empty()) throw std::runtime_error(path + " holds no rows");
  at::Tensor is_init = torch::ones({static_cast<int64_t>(rows.size()), width}, torch::kBool);
  for (size_t r = 0; r < rows.size(); ++r) {
    int64_t column = 0;
    for (const int64_t length : rows[r]) {
      is_init[static_cast<int64_t>(r)].narrow(0, column + 1, length - 1).fill_(false);
      column += length;
    }
  }
  return is_init;
}

kvrl::TransformerModule make_module(const ModelShape& shape, bool tiled) {
  torch::manual_seed(0);
  kvrl::TransformerModuleOptions options;
  options.input_size = shape.input;
  options.hidden_size = shape.hidden;
  options.num_layers = shape.layers;
  options.num_heads = shape.heads;
  options.max_seq_len = shape.max_seq_len;
  options.tiled_attention = tiled;
  return kvrl::TransformerModule(options);
}

double seconds_of(kvrl::TransformerModule& module, const at::Tensor& obs, const at::Tensor& is_init) {
  module.zero_grad();
  const auto begin = std::chrono::steady_clock::now();
  module.window(obs, is_init).sum().backward();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

void write_traces(const std::string& prefix, kvrl::TransformerModule& tiled, kvrl::TransformerModule& whole,
                  const at::Tensor& obs, const at::Tensor& is_init) {
  {
    const torch::autograd::profiler::RecordProfile profile(prefix + "-kvrl.trace");
    seconds_of(tiled, obs, is_init);
  }
  const torch::autograd::profiler::RecordProfile profile(prefix + "-whole.trace");
  seconds_of(whole, obs, is_init);
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8 && argc != 9) {
    std::fprintf(stderr, "usage: %s ROWS_FILE REPEATS HIDDEN LAYERS HEADS INPUT MAX_SEQ_LEN [TRACE_PREFIX]\n",
                 argv[0]);
    return 2;
  }
  try {
    const int64_t repeats = std::stoll(argv[2]);
    const ModelShape shape{std::stoll(argv[3]), std::stoll(argv[4]), std::stoll(argv[5]), std::stoll(argv[6]),
                           std::stoll(argv[7])};
    at::set_num_threads(1);
    const at::Tensor is_init = read_rows(argv[1], shape.max_seq_len);
    const at::Tensor obs = torch::randn({is_init.size(0), is_init.size(1), shape.input});
    kvrl::TransformerModule tiled = make_module(shape, true);
    kvrl::TransformerModule whole = make_module(shape, false);
    std::vector<double> tiled_s, whole_s;
    // The first round warms up; the order alternates so that neither always goes first.
    for (int64_t r = 0; r <= repeats; ++r) {
      const double a = seconds_of(r % 2 == 0 ? tiled : whole, obs, is_init);
      const double b = seconds_of(r % 2 == 0 ? whole : tiled, obs, is_init);
      if (r == 0) continue;
      tiled_s.push_back(r % 2 == 0 ? a : b);
      whole_s.push_back(r % 2 == 0 ? b : a);
    }
    if (argc == 9) write_traces(argv[8], tiled, whole, obs, is_init);
    // What TransformerModule::window takes: context by context, or plain causal where every
    // row is one context (the bench's models have no sliding window).
    const kvrl::SegmentAttention contexts(is_init);
    std::printf(
        "{\"rows\": %lld, \"width\": %lld, \"path\": \"%s\", \"kvrl_s\": %.9g, \"whole_s\": %.9g, "
        "\"scored_fraction\": %.6f, \"groups\": %zu}\n",
        static_cast<long long>(is_init.size(0)), static_cast<long long>(is_init.size(1)),
        contexts.one_context_per_row() ? "causal" : "contexts", median(tiled_s), median(whole_s),
        contexts.scored_fraction(), contexts.group_count());
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kvrl_bench_window_attention: %s\n", error.what());
    return 1;
  }
  return 0;
}
