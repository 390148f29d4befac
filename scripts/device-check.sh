#!/usr/bin/env bash
# GPU checks, for a machine with one GPU (not CI, which has none). Builds kvrl against the
# Python torch already installed there, then, in about five minutes:
#   1. the CUDA and NCCL tests (suffixes _CUDA, _NCCL): cache parity GPU vs CPU, a learner
#      update GPU vs CPU, a one-rank NCCL all-reduce and broadcast, the staged weight
#      broadcast's NCCL transport on one rank, the overlapped gradient all-reduce started
#      from autograd's device thread on one rank;
#   2. a short GPU training run: 1 learner + 1 actor on the one GPU, weights over MPI
#      (NCCL refuses two ranks on one GPU, so `auto` picks MPI messages), then the same
#      with bf16 autocast on both sides and weights by the staged MPI broadcast;
#   3. the device benchmark (bench/device_bench.cpp): actor cached step for 64 to 4096
#      environments and learner window tokens/s, GPU against CPU; then the collectives
#      benchmark on one rank (NCCL works; bus bandwidth needs two GPUs or more), whose
#      second table times a learner step with the all-reduce overlapped with backward.
# Logs and the benchmark's JSON go to $OUT (the device tool's folder) or ./device-check.
#
# The machine needs what kvrl builds against besides torch: Open MPI, spdlog, yaml-cpp,
# GoogleTest and Boost headers. Where they are missing and cannot be installed, carry
# their Debian packages (apt-get download ...) in a folder named by KVRL_DEBS; they are
# unpacked into /tmp/kvrl-deps and used from there.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-device-check}"
mkdir -p "$out"
build=/tmp/kvrl-device-build
log() { echo "[device-check] $*" | tee -a "$out/device-check.log"; }

if [ -n "${KVRL_DEBS:-}" ]; then
  mkdir -p /tmp/kvrl-deps
  for deb in "$KVRL_DEBS"/*.deb; do dpkg -x "$deb" /tmp/kvrl-deps; done
  export PATH="/tmp/kvrl-deps/usr/bin:$PATH"
  export LD_LIBRARY_PATH="/tmp/kvrl-deps/usr/lib/x86_64-linux-gnu:/tmp/kvrl-deps/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}"
  export CMAKE_PREFIX_PATH="/tmp/kvrl-deps/usr:${CMAKE_PREFIX_PATH:-}"
  export OPAL_PREFIX=/tmp/kvrl-deps/usr/lib/x86_64-linux-gnu/openmpi
fi
torch_prefix=$(python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
log "torch $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)'), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
for tool in mpicc mpirun cmake; do command -v "$tool" >/dev/null || { log "missing: $tool (see KVRL_DEBS above)"; exit 1; }; done

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$torch_prefix;${CMAKE_PREFIX_PATH:-}" \
  -DKVRL_WITH_CUDA=ON -DKVRL_BUILD_TESTS=ON -DKVRL_BUILD_BENCH=ON 2>&1 | tee "$out/configure.log" | grep -A14 "kvrl .* configuration"
cmake --build "$build" -j16 --target common_test learner_test kvrl kvrl_bench_device kvrl_bench_collectives 2>&1 | tail -3 | tee -a "$out/device-check.log"

log "1. CUDA and NCCL tests"
"$build/tests/common_test" --gtest_filter='*_CUDA:*_NCCL' 2>&1 | tee "$out/tests.log" | tail -5
"$build/tests/learner_test" --gtest_filter='*_CUDA:*_NCCL' 2>&1 | tee -a "$out/tests.log" | tail -5

log "2. GPU training: 1 learner + 1 actor on one GPU, 100k env steps"
KVRL_PROGRESS=plain timeout 300 launch/kvrl-mpirun -np 2 "$build/launch/kvrl" train configs/cartpole_ppo.yaml \
  run.dir=/tmp/kvrl-device-run learner.device=cuda actor.device=cuda actor.credit_steps=4096 \
  run.total_env_steps=100000 2>&1 | tee "$out/train.log" | grep -E "running on|NCCL|finished|error" || true
cp /tmp/kvrl-device-run/rank0.json "$out/train_rank0.json" 2>/dev/null || true
KVRL_PROGRESS=plain timeout 200 launch/kvrl-mpirun -np 2 "$build/launch/kvrl" train configs/cartpole_ppo.yaml \
  run.dir=/tmp/kvrl-device-run-bf16 learner.device=cuda actor.device=cuda actor.credit_steps=4096 \
  learner.autocast=bfloat16 actor.autocast=bfloat16 learner.weight_broadcast=mpi_broadcast \
  run.total_env_steps=50000 2>&1 | tee "$out/train_bf16.log" | grep -E "autocast|MPI_Ibcast|finished|error" || true

log "3. device benchmark"
"$build/bench/kvrl_bench_device" --json "$out/device_bench.json" 2>&1 | tee "$out/device_bench.log"
timeout 120 launch/kvrl-mpirun -np 1 "$build/bench/kvrl_bench_collectives" --device cuda \
  --json "$out/collectives_bench.json" 2>&1 | tee "$out/collectives_bench.log"
log "done: results in $out"
