#!/usr/bin/env bash
# The main job on a fresh machine: installs what is missing, builds kvrl, and trains PPO
# on CartPole-v1 with 1 learner and 2 actors under mpirun on this node. Extra arguments
# are config overrides (key=value), e.g. run.total_env_steps=100000.
#   KVRL_BUILD_DIR  build folder (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${KVRL_BUILD_DIR:-build}"

scripts/setup.sh
cmake -S . -B "$build_dir" >"$build_dir.configure.log" 2>&1 || { cat "$build_dir.configure.log"; exit 1; }
cmake --build "$build_dir" -j2 --target kvrl
exec launch/kvrl-mpirun -np 3 "$build_dir/launch/kvrl" train configs/cartpole_ppo.yaml "$@"
