#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds kvrl, and runs the
# transformer demo (step and window paths side by side). Arguments go to the demo.
#   KVRL_BUILD_DIR  build folder (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${KVRL_BUILD_DIR:-build}"

scripts/setup.sh
cmake -S . -B "$build_dir" -DKVRL_BUILD_TESTS=OFF >"$build_dir.configure.log" 2>&1 \
  || { cat "$build_dir.configure.log"; exit 1; }
cmake --build "$build_dir" -j2 --target kvrl
exec "$build_dir/launch/kvrl" transformer-demo "$@"
