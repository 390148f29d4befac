// What the command line asks for, as parsed by CLI11 in launch/main.cpp; each command
// checks its own values (ranges, files) and says what is wrong with them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kvrl {

// `kvrl train [CONFIG.yaml] [--resume RUN_DIR] [key=value ...]`
struct TrainArguments {
  std::vector<std::string> positional;    // the config file (first, when it has no '='), then overrides
  std::optional<std::string> resume_dir;  // absent: a fresh run
};

// `kvrl actor CONFIG.yaml --connect HOST:PORT --token-file FILE [key=value ...]`
struct RemoteActorArguments {
  std::vector<std::string> positional;  // the config file, then overrides
  std::string connect;                  // learner 0's HOST:PORT (remote.port)
  std::string token_file;               // the run's remote.token_file
  std::string log_path;                 // empty: the console only
  std::string connect_timeout_s = "30";
};

// `kvrl eval CHECKPOINT [--env NAME] [--episodes N] [--seed S] [--greedy]`
struct EvalArguments {
  std::string checkpoint;
  std::string env_name;  // empty: the checkpoint's
  std::string episodes = "10";
  std::string seed = "0";
  bool greedy = false;
  std::string trace_path;  // non-empty: write every step played here (torch.load)
  std::string max_steps;   // non-empty: episodes end (truncated) after this many steps
};

// `kvrl transformer-demo [--envs N] [--steps T] [--seed S]`
struct DemoArguments {
  std::string envs = "16";
  std::string steps = "200";
  std::string seed = "0";
};

// The integer `text` of option `option`, in [low, high]; throws InvalidArgumentError naming
// the option, the text and the range otherwise.
int64_t parse_count(const std::string& option, const std::string& text, int64_t low, int64_t high);

}  // namespace kvrl
