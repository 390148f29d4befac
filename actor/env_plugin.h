// The entry point of a user environment plugin: a shared library that defines, with
// KVRL_ENV_PLUGIN, a C function returning its EnvPluginInfo. kvrl loads it by path
// (`env.plugin: path/to/libmyenv.so`) and checks abi_version before calling create().
// The plugin must be built against the same kvrl headers and C++ standard library; it
// resolves kvrl symbols (Environment, Space) against the program that loads it, which
// exports them (ENABLE_EXPORTS), so a plugin links no kvrl library of its own.
#pragma once

#include "actor/env_registry.h"

namespace kvrl {

// Bumped whenever Environment, Space or EnvOptions change layout.
inline constexpr int kEnvPluginAbiVersion = 2;  // 2: Environment holds a step-limit override

struct EnvPluginInfo {
  int abi_version;  // kEnvPluginAbiVersion of the headers the plugin was built with
  const char* name;
  // Returns a new environment owned by the caller; may throw InvalidArgumentError.
  Environment* (*create)(const EnvOptions& options);
};

}  // namespace kvrl

#define KVRL_ENV_PLUGIN_ENTRY_POINT "kvrl_env_plugin_v1"

// Defines the plugin's entry point. `factory` is Environment* (*)(const EnvOptions&).
#define KVRL_ENV_PLUGIN(plugin_name, factory)                                                    \
  extern "C" const ::kvrl::EnvPluginInfo* kvrl_env_plugin_v1() {                                 \
    static const ::kvrl::EnvPluginInfo info{::kvrl::kEnvPluginAbiVersion, plugin_name, factory}; \
    return &info;                                                                                \
  }
