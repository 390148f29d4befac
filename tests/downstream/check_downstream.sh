#!/usr/bin/env bash
# Installs kvrl from BUILD_DIR into a scratch prefix, then configures and builds
# tests/downstream against it with find_package(kvrl), runs its program and checks that
# the plugin exports kvrl's entry point. Usage: check_downstream.sh BUILD_DIR SCRATCH_DIR
set -euo pipefail
build=$1 scratch=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >"$scratch.install.log" 2>&1 || { cat "$scratch.install.log"; exit 1; }
torch_prefix=$(cat "${KVRL_CACHE:-$HOME/.cache/kvrl}/torch_prefix")
cmake -S "$here" -B "$scratch/build" -DCMAKE_PREFIX_PATH="$scratch/prefix;$torch_prefix" \
  -DKVRL_EXAMPLE_PLUGIN_SOURCE="$here/../plugins/two_armed_bandit_plugin.cpp"
cmake --build "$scratch/build" -j2
"$scratch/build/downstream_codec_roundtrip"
nm -D --defined-only "$scratch/build/libdownstream_bandit.so" | grep -q ' kvrl_env_plugin_v1$' \
  || { echo "the plugin does not export kvrl_env_plugin_v1"; exit 1; }
echo "downstream project built against the installed kvrl"
