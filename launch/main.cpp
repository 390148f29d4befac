// The kvrl executable: dispatches to one subcommand per job.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "common/accelerator_probe.h"
#include "common/errors.h"
#include "launch/train_config.h"
#include "launch/env_rollout_command.h"
#include "launch/eval_command.h"
#include "launch/train_command.h"
#include "launch/transformer_demo_command.h"
#include "launch/transformer_eval_command.h"

namespace {

constexpr const char* kUsage =
    "usage: kvrl <command> [args]\n"
    "commands:\n"
    "  transformer-demo [--envs N] [--steps T] [--seed S]\n"
    "                                  step streams through the KV cache, then compare with the window path\n"
    "  transformer-eval IN.pt OUT.pt   run the transformer core on a torch.save'd input\n"
    "  train CONFIG.yaml [key=value ...]\n"
    "                                  distributed training (under mpirun; see launch/kvrl-mpirun)\n"
    "  train [CONFIG.yaml] --resume RUN_DIR [key=value ...]\n"
    "                                  continue a run from its newest usable checkpoint\n"
    "  eval CHECKPOINT [--env NAME] [--episodes N] [--seed S] [--greedy]\n"
    "                                  play a saved policy: mean and std of the return, episode lengths\n"
    "  export CHECKPOINT OUT.pt        the policy as a state dict with the reference's names (torch.load)\n"
    "  env-rollout IN.pt OUT.pt        roll out an environment from a state with given actions\n"
    "  config-reference                print every config key as a markdown table (docs/config.md)\n"
    "  info                            what this build and machine can run on\n"
    "  help                            show this message\n";

int usage_error(const std::string& message) {
  std::fprintf(stderr, "kvrl: %s\n%s", message.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command given");
  const std::string& command = args[0];
  try {
    if (command == "help" || command == "--help" || command == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (command == "train") return kvrl::run_train({args.begin() + 1, args.end()});
    if (command == "eval") return kvrl::run_eval({args.begin() + 1, args.end()});
    if (command == "export") return kvrl::run_export({args.begin() + 1, args.end()});
    if (command == "env-rollout") {
      if (args.size() != 3) return usage_error("env-rollout takes IN.pt OUT.pt");
      kvrl::run_env_rollout(args[1], args[2]);
      return 0;
    }
    if (command == "config-reference") {
      std::fputs(kvrl::TrainConfig::reference_markdown().c_str(), stdout);
      return 0;
    }
    if (command == "info") {
      std::printf("%s\n", kvrl::probe_accelerators().summary().c_str());
      return 0;
    }
    if (command == "transformer-demo") {
      return kvrl::run_transformer_demo({args.begin() + 1, args.end()});
    }
    if (command == "transformer-eval") {
      if (args.size() != 3) return usage_error("transformer-eval takes IN.pt OUT.pt");
      kvrl::run_transformer_eval(args[1], args[2]);
      return 0;
    }
    return usage_error("unknown command '" + command + "'");
  } catch (const kvrl::InvalidArgumentError& error) {
    // Exit 2: the input was refused (a value, an argument or a file); 1: something else failed.
    std::fprintf(stderr, "kvrl: error: %s\n", error.what());
    return 2;
  } catch (const kvrl::MalformedInputError& error) {
    std::fprintf(stderr, "kvrl: error: %s\n", error.what());
    return 2;
  } catch (const kvrl::Error& error) {
    std::fprintf(stderr, "kvrl: error: %s\n", error.what());
    return 1;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "kvrl %s: internal error: %s\n", command.c_str(), error.what());
    return 3;
  }
}
