#!/usr/bin/env bash
# The GPU verdict in one run, for a machine with one GPU and the torch wheel installed:
# builds kvrl against that torch, runs every GPU test and the GPU benchmarks, each under
# `timeout`, and a CartPole training run on the GPU; fails (exit 1) if any step fails.
# Planned for at most 9 minutes on one H200 with 16 cores, build included.
#
#   scripts/device-check.sh [OUT_DIR]              on the GPU machine (OUT_DIR: $OUT or ./device-check)
#   scripts/device-check.sh --rehearse [OUT_DIR]   every step on this CPU-only machine, the device
#                                                  steps on the CPU with the same assertions
#                                                  (tests/device_under_test.h); CI runs it
#   scripts/device-check.sh --prepare-carry DIR    fills DIR with what the GPU machine lacks and
#                                                  cannot download (Debian packages, wheels)
#
# Results are written as they come: OUT_DIR/results.json and OUT_DIR/results.md (a table of
# the steps with their status, time and figures) are rewritten after every step, so a run
# cut short still leaves what it measured; each step's output is in OUT_DIR/<step>.log.
#
# The GPU machine has no internet. Besides torch, kvrl builds against Open MPI, spdlog,
# yaml-cpp, GoogleTest and Boost headers, and the reference benchmark imports torchrl and
# tensordict. Where they are missing, carry them: run `--prepare-carry .device-carry` here
# and send `.device-carry` along (the device tool's `carry`); the script then unpacks the
# Debian packages (KVRL_DEBS, default .device-carry/debs) into /tmp/kvrl-deps and installs
# the wheels (KVRL_WHEELS, default .device-carry/wheels) with pip --no-index --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=gpu
case "${1:-}" in
  --rehearse) mode=rehearse; shift ;;
  --prepare-carry) mode=prepare; shift ;;
  -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
  -*) echo "device-check: unknown option $1 (expected --rehearse, --prepare-carry DIR or an output folder)" >&2; exit 2 ;;
esac

carry_debs="openmpi-bin libopenmpi-dev libopenmpi3 libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7
  libfabric1 libucx0 libpsm2-2 libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 libyaml-cpp-dev libyaml-cpp0.7
  libgtest-dev libboost1.74-dev ninja-build"
carry_wheels="torchrl-nightly==2026.10.27 tensordict-nightly==2026.10.26 pyvers"

if [ "$mode" = prepare ]; then
  dir="${1:?--prepare-carry needs a folder}"
  mkdir -p "$dir/debs" "$dir/wheels"
  (cd "$dir/debs" && apt-get download $carry_debs)
  python3 -m pip download --no-deps -d "$dir/wheels" $carry_wheels
  du -sh "$dir"
  exit 0
fi

out="${1:-${OUT:-device-check}}"
mkdir -p "$out"
out=$(cd "$out" && pwd)
: >"$out/steps.jsonl"
failures=0

if [ "$mode" = rehearse ]; then
  device=cpu
  build="${KVRL_BUILD_DIR:-build}"
  python="${KVRL_PYTHON:-${KVRL_CACHE:-$HOME/.cache/kvrl}/venv/bin/python}"
  export KVRL_REHEARSE=1
  bench_grid=rehearsal
  train_steps=500000
else
  device=cuda
  build=/tmp/kvrl-device-build
  python="${KVRL_PYTHON:-python3}"
  bench_grid=device
  train_steps=500000
fi

export mode device build python bench_grid train_steps out
log() { echo "[device-check] $*" | tee -a "$out/device-check.log"; }

# run_step NAME ESTIMATE_S TIMEOUT_S COMMAND...: runs COMMAND under `timeout` with its output
# in NAME.log, records the outcome and rewrites the results.
run_step() {
  local name=$1 estimate=$2 limit=$3
  shift 3
  log "step $name (about ${estimate} s, at most ${limit} s): $*"
  local start status
  start=$(date +%s.%N)
  set +e
  # `timeout` runs programs, not this script's functions: the step's function goes along
  # as text into a bash of its own, with the settings exported below.
  timeout --kill-after=10 "$limit" bash -c "set -euo pipefail; $(declare -f "$1"); $*" >"$out/$name.log" 2>&1
  local code=$?
  set -e
  local seconds
  seconds=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
  case $code in
    0) status=passed ;;
    124|137) status="timed out" ;;
    *) status="failed (exit $code)" ;;
  esac
  [ "$status" = passed ] || failures=$((failures + 1))
  printf '{"step": "%s", "status": "%s", "seconds": %s, "estimate_s": %s, "limit_s": %s, "log": "%s.log"}\n' \
    "$name" "$status" "$seconds" "$estimate" "$limit" "$name" >>"$out/steps.jsonl"
  log "step $name: $status in ${seconds} s"
  [ "$status" = passed ] || tail -20 "$out/$name.log" | sed 's/^/    /'
  if ! "$python" scripts/device_check_report.py "$out" --mode "$mode"; then
    log "could not write the results table"
    failures=$((failures + 1))
  fi
}

unpack_carried() {
  local debs="${KVRL_DEBS:-.device-carry/debs}" wheels="${KVRL_WHEELS:-.device-carry/wheels}"
  if [ -d "$debs" ] && ls "$debs"/*.deb >/dev/null 2>&1; then
    mkdir -p /tmp/kvrl-deps
    for deb in "$debs"/*.deb; do dpkg -x "$deb" /tmp/kvrl-deps; done
    export PATH="/tmp/kvrl-deps/usr/bin:$PATH"
    export LD_LIBRARY_PATH="/tmp/kvrl-deps/usr/lib/x86_64-linux-gnu:/tmp/kvrl-deps/usr/lib/x86_64-linux-gnu/openmpi/lib:${LD_LIBRARY_PATH:-}"
    export CMAKE_PREFIX_PATH="/tmp/kvrl-deps/usr:${CMAKE_PREFIX_PATH:-}"
    export OPAL_PREFIX=/tmp/kvrl-deps/usr
    log "unpacked $(ls "$debs"/*.deb | wc -l) carried Debian packages into /tmp/kvrl-deps"
  fi
  if [ -d "$wheels" ] && ls "$wheels"/*.whl >/dev/null 2>&1 && ! "$python" -c 'import torchrl' 2>/dev/null; then
    "$python" -m pip install --quiet --no-index --no-deps "$wheels"/*.whl && log "installed the carried wheels"
  fi
}

build_kvrl() {
  if [ "$mode" = rehearse ]; then
    cmake --build "$build" -j2 --target common_test learner_test kvrl kvrl_bench_device kvrl_bench_collectives \
      kvrl_bench_transformer
    return
  fi
  local torch_prefix generator=()
  torch_prefix=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix;${CMAKE_PREFIX_PATH:-}" -DKVRL_WITH_CUDA=ON -DKVRL_BUILD_TESTS=ON \
    -DKVRL_BUILD_BENCH=ON -DKVRL_TEST_PYTHON="$(command -v "$python")"
  cmake --build "$build" -j"$(nproc)" --target common_test learner_test kvrl kvrl_bench_device \
    kvrl_bench_collectives kvrl_bench_transformer
}

# The hardware tests but the watchdog test, which stalls the device's stream on purpose and
# so runs in a process of its own.
gpu_tests() {
  local watchdog='CollectivesOnDevice.AStalledAllReduceReachesTheWatchdogWithANamedError_NCCL'
  "$build/tests/common_test" --gtest_filter="*_CUDA:*_NCCL:-$watchdog"
  "$build/tests/learner_test" --gtest_filter='*_CUDA:*_NCCL'
}

watchdog_test() {
  "$build/tests/common_test" --gtest_filter='CollectivesOnDevice.AStalledAllReduceReachesTheWatchdogWithANamedError_NCCL'
}

# CartPole on the device: 1 learner + 2 actors sharing it, then the mean return checked.
# One GPU cannot hold an NCCL group of learner 0 and the actors, so `auto` names the
# fallback it takes for the weights (MPI messages) in the log, which the check requires.
train_on_device() {
  rm -rf /tmp/kvrl-device-run
  KVRL_PROGRESS=plain launch/kvrl-mpirun -np 3 "$build/launch/kvrl" train configs/cartpole_ppo.yaml \
    run.dir=/tmp/kvrl-device-run learner.device="$device" actor.device="$device" \
    run.total_env_steps="$train_steps"
  cp /tmp/kvrl-device-run/rank*.json "$out/"
  "$python" - "$out" "$device" <<'EOF'
import glob, json, os, sys
out, device = sys.argv[1], sys.argv[2]
learner = json.load(open(os.path.join(out, "rank0.json")))
log = open("/tmp/kvrl-device-run/rank0.log").read() + open("/tmp/kvrl-device-run/rank1.log").read()
print(f"mean return {learner['mean_return']:.1f} (target >= 450)")
assert learner["mean_return"] >= 450, f"mean return {learner['mean_return']:.1f} < 450"
assert f"running on {device}" in log or (device == "cpu" and "running on CPU" in log), "no rank says it runs on " + device
assert "weights go to the actors" in log, "the weight path is not named in the learner's log"
if device == "cuda":
    actors = [json.load(open(p)) for p in glob.glob(os.path.join(out, "rank[12].json"))]
    assert all(a["graph_steps"] > 0 for a in actors), "an actor on the GPU never replayed a CUDA graph"
EOF
}

bench_transformer() {
  "$python" bench/transformer_bench.py --kvrl-bench "$build/bench/kvrl_bench_transformer" --grid "$bench_grid" \
    --device "$device" --out "$out/transformer_bench.json" --step-repeats 2 --window-repeats 2
}

bench_device() {
  "$build/bench/kvrl_bench_device" --json "$out/device_bench.json" ${KVRL_REHEARSE:+--steps 20}
}

bench_collectives() {
  launch/kvrl-mpirun -np 1 "$build/bench/kvrl_bench_collectives" --device "$device" --json "$out/collectives_bench.json"
}

plan() {
  log "mode $mode, device $device, results in $out"
  log "plan (seconds, estimate / limit):"
  log "  build         150 / 330   cmake + the test and bench targets (rehearsal: the existing $build)"
  log "  gpu_tests      40 / 120   common_test, learner_test: *_CUDA and *_NCCL (parity, cache memory, collectives)"
  log "  watchdog       10 / 60    a stalled NCCL all-reduce must reach the watchdog with a named error"
  log "  train         120 / 240   CartPole, 1 learner + 2 actors on the $device, mean return >= 450"
  log "  bench_transformer 90 / 200  cached step and window fwd+bwd vs TorchRL (targets 5x at B<=8, 1.0x)"
  log "  bench_device   30 / 90    actor steps and learner windows, GPU vs CPU"
  log "  bench_collectives 15 / 60 all-reduce/broadcast bus bandwidth and the overlapped learner step"
  log "  total about 455 s; a step past its limit is killed and counted as failed, and the next step runs"
}

plan
if [ "$mode" = gpu ]; then
  unpack_carried
  log "torch $("$python" -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)'), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  for tool in mpicc mpirun cmake; do command -v "$tool" >/dev/null || { log "missing: $tool (see --prepare-carry)"; exit 1; }; done
fi
run_step build 150 330 build_kvrl
if [ "$failures" -gt 0 ]; then log "the build failed: nothing else can run"; exit 1; fi
run_step gpu_tests 40 120 gpu_tests
run_step watchdog 10 60 watchdog_test
run_step train 120 240 train_on_device
run_step bench_transformer 90 200 bench_transformer
run_step bench_device 30 90 bench_device
run_step bench_collectives 15 60 bench_collectives
log "done: $failures step(s) failed; results in $out/results.md"
[ "$failures" -eq 0 ]
