// A plugin built for another ABI version, to test that kvrl refuses it.
#include "actor/env_plugin.h"

extern "C" const kvrl::EnvPluginInfo* kvrl_env_plugin_v1() {
  static const kvrl::EnvPluginInfo info{kvrl::kEnvPluginAbiVersion + 1, "Future", nullptr};
  return &info;
}
