// The kvrl executable: one subcommand per job, parsed with CLI11. `kvrl --help` and
// `kvrl COMMAND --help` list the options; a bad argument names itself and what is allowed
// (exit 2).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "common/comm/accelerator_probe.h"
#include "common/support/errors.h"
#include "launch/actor_command.h"
#include "launch/command_line.h"
#include "launch/env_rollout_command.h"
#include "launch/eval_command.h"
#include "launch/train_command.h"
#include "launch/train_config.h"
#include "launch/transformer_demo_command.h"
#include "launch/transformer_eval_command.h"

namespace {

// Set by the subcommand the line chose; runs after parsing.
using Command = std::function<int()>;

// Under mpirun every rank parses the same line: one of them prints help or reports a bad one.
bool reports_for_the_job() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    if (const char* rank = std::getenv(variable)) return std::string(rank) == "0";
  }
  return true;
}

void add_train(CLI::App& app, kvrl::TrainArguments& train, Command& command) {
  CLI::App* sub = app.add_subcommand("train", "distributed training, under mpirun (launch/kvrl-mpirun)");
  sub->add_option("--resume", train.resume_dir,
                  "continue the run in RUN_DIR from its newest usable checkpoint")
      ->type_name("RUN_DIR");
  sub->add_option("args", train.positional, "the config file, then key=value overrides (docs/config.md)")
      ->type_name("[CONFIG.yaml] [key=value ...]");
  sub->callback([&] { command = [&] { return kvrl::run_train(train); }; });
}

void add_actor(CLI::App& app, kvrl::RemoteActorArguments& actor, Command& command) {
  CLI::App* sub = app.add_subcommand(
      "actor", "an actor outside the MPI job that joins a running training over TCP (remote.port)");
  sub->add_option("--connect", actor.connect, "learner 0's address and remote.port")
      ->type_name("HOST:PORT")
      ->required();
  sub->add_option("--token-file", actor.token_file,
                  "the file holding the run's shared token (remote.token_file)")
      ->type_name("FILE")
      ->required();
  sub->add_option("--log", actor.log_path, "also log to this file")->type_name("FILE");
  sub->add_option("--connect-timeout", actor.connect_timeout_s,
                  "seconds to keep trying to connect (default 30)")
      ->type_name("S");
  sub->add_option("args", actor.positional, "the training's config file, then key=value overrides")
      ->type_name("CONFIG.yaml [key=value ...]");
  sub->callback([&] { command = [&] { return kvrl::run_remote_actor(actor); }; });
}

void add_eval(CLI::App& app, kvrl::EvalArguments& eval, Command& command) {
  CLI::App* sub =
      app.add_subcommand("eval", "play a saved policy: mean and std of the return, episode lengths");
  sub->add_option("checkpoint", eval.checkpoint, "a checkpoint of kvrl train")
      ->required()
      ->type_name("CHECKPOINT");
  sub->add_option("--env", eval.env_name, "play in this environment instead of the checkpoint's")
      ->type_name("NAME");
  sub->add_option("--episodes", eval.episodes, "episodes to play, in [1, 10000] (default 10)")
      ->type_name("N");
  sub->add_option("--seed", eval.seed, "seeds the environments and sampling (default 0)")->type_name("S");
  sub->add_flag("--greedy", eval.greedy, "take the most likely action instead of sampling");
  sub->add_option("--trace", eval.trace_path,
                  "write each episode's observations, actions, rewards and context starts to this file "
                  "(torch.load)")
      ->type_name("OUT.pt");
  sub->add_option(
         "--max-steps", eval.max_steps,
         "end each episode after N steps, truncated (needed where the environment has no time limit)")
      ->type_name("N");
  sub->callback([&] { command = [&] { return kvrl::run_eval(eval); }; });
}

// A subcommand of two file arguments, IN and OUT.
void add_in_out(CLI::App& app, const std::string& name, const std::string& description,
                const std::string& in_name, std::vector<std::string>& paths,
                const std::function<void(const std::string&, const std::string&)>& run, Command& command) {
  CLI::App* sub = app.add_subcommand(name, description);
  sub->add_option("paths", paths, "input and output files")
      ->required()
      ->expected(2)
      ->type_name(in_name + " OUT.pt");
  sub->callback([&paths, run, &command] {
    command = [&paths, run] {
      run(paths[0], paths[1]);
      return 0;
    };
  });
}

void add_demo(CLI::App& app, kvrl::DemoArguments& demo, Command& command) {
  CLI::App* sub = app.add_subcommand("transformer-demo",
                                     "step streams through the KV cache, then compare with the window path");
  sub->add_option("--envs", demo.envs, "concurrent streams (default 16)")->type_name("N");
  sub->add_option("--steps", demo.steps, "steps per stream, at most 256 (default 200)")->type_name("T");
  sub->add_option("--seed", demo.seed, "seed (default 0)")->type_name("S");
  sub->callback([&] { command = [&] { return kvrl::run_transformer_demo(demo); }; });
}

void add_printing(CLI::App& app, const std::string& name, const std::string& description,
                  const std::function<std::string()>& text, Command& command) {
  app.add_subcommand(name, description)->callback([text, &command] {
    command = [text] {
      std::fputs(text().c_str(), stdout);
      return 0;
    };
  });
}

// What is allowed where `error` happened: the chosen subcommand's arguments, or the commands.
std::string allowed_here(CLI::App& app) {
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  std::string allowed;
  const auto add = [&allowed](const std::string& item) { allowed += (allowed.empty() ? "" : ", ") + item; };
  if (chosen.empty()) {
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) add(sub->get_name());
    return "the commands are " + allowed;
  }
  for (const CLI::Option* option : chosen.front()->get_options()) {
    if (option == chosen.front()->get_help_ptr()) continue;
    add(option->nonpositional() ? option->get_name(false, true) : option->get_type_name());
  }
  return "kvrl " + chosen.front()->get_name() + " takes " + allowed;
}

int refuse(CLI::App& app, const CLI::ParseError& error) {
  if (!reports_for_the_job()) return 2;
  const std::vector<CLI::App*> chosen = app.get_subcommands();
  const std::vector<std::string> extras = chosen.empty() ? app.remaining() : chosen.front()->remaining();
  std::string message = error.what();
  if (chosen.empty() && !extras.empty()) {
    message = "unknown command '" + extras.front() + "'";
  } else if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr && !extras.empty()) {
    message = "unknown argument '" + extras.front() + "'";
  }
  std::fprintf(stderr, "kvrl: error: %s (%s; see kvrl --help)\n", message.c_str(), allowed_here(app).c_str());
  return 2;
}

int run(const Command& command, const std::string& name) {
  try {
    return command();
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
    std::fprintf(stderr, "kvrl %s: internal error: %s\n", name.c_str(), error.what());
    return 3;
  }
}

int parse_and_run(int argc, char** argv) {
  CLI::App app("kvrl: distributed actor-learner reinforcement learning with transformer policies", "kvrl");
  app.require_subcommand(1);
  Command command;
  kvrl::TrainArguments train;
  kvrl::EvalArguments eval;
  kvrl::DemoArguments demo;
  std::vector<std::string> export_paths, rollout_paths, transformer_paths;
  kvrl::RemoteActorArguments actor;
  add_train(app, train, command);
  add_actor(app, actor, command);
  add_eval(app, eval, command);
  add_in_out(app, "export", "the policy as a state dict with the reference's names (torch.load)",
             "CHECKPOINT", export_paths, kvrl::run_export, command);
  add_in_out(app, "env-rollout", "roll out an environment from a state with given actions", "IN.pt",
             rollout_paths, kvrl::run_env_rollout, command);
  add_in_out(app, "transformer-eval", "run the transformer core on a torch.save'd input", "IN.pt",
             transformer_paths, kvrl::run_transformer_eval, command);
  add_demo(app, demo, command);
  add_printing(app, "config-reference", "print every config key as a markdown table (docs/config.md)",
               kvrl::TrainConfig::reference_markdown, command);
  add_printing(
      app, "info", "what this build and machine can run on",
      [] { return kvrl::probe_accelerators().summary() + "\n"; }, command);
  app.add_subcommand("help", "this list of commands (kvrl COMMAND --help for a command's options)")
      ->callback([&app, &command] {
        command = [&app] {
          std::fputs(app.get_formatter()->make_help(&app, "kvrl", CLI::AppFormatMode::Normal).c_str(),
                     stdout);
          return 0;
        };
      });
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return reports_for_the_job() ? app.exit(help) : 0;
  } catch (const CLI::CallForAllHelp& help) {
    return reports_for_the_job() ? app.exit(help) : 0;
  } catch (const CLI::ParseError& error) {
    return refuse(app, error);
  }
  return run(command, app.get_subcommands().front()->get_name());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return parse_and_run(argc, argv);
  } catch (const std::exception& error) {  // from setting up the parser itself, e.g. out of memory
    std::fprintf(stderr, "kvrl: internal error: %s\n", error.what());
    return 3;
  }
}
