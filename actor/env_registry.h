// Environments by name, for configs (`env.name: CartPole-v1`, plus per-env options), and
// from user plugins: shared libraries loaded by path (see env_plugin.h).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actor/environment.h"

namespace kvrl {

// Per-environment options by name, e.g. {"corridor_length": 10}.
using EnvOptions = std::map<std::string, double>;

// The built-in names, sorted.
std::vector<std::string> builtin_environment_names();

// Makes a built-in environment. Throws InvalidArgumentError naming the bad name (and the
// names allowed) or the bad option (and the options that environment takes).
std::unique_ptr<Environment> make_environment(const std::string& name, const EnvOptions& options);

// Loads the plugin at `path` (once per process) and makes its environment. Throws
// InvalidArgumentError when the file cannot be loaded, lacks the entry point, or was
// built for another plugin ABI version.
std::unique_ptr<Environment> make_plugin_environment(const std::string& path, const EnvOptions& options);

}  // namespace kvrl
