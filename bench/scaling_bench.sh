#!/usr/bin/env bash
# The figures of docs/benchmarks.md "Multi-node scaling" (#21) in one command, each part's
# JSON collected into one file:
#
#   bench/scaling_bench.sh [--out FILE] [--parts LIST] [--repeats R] [--steps N]
#
# Parts (all by default, in this order; LIST is comma-separated):
#   single     kvrl_bench_scaling on this host with 2, 4, 8 and 16 actors (1 + N ranks,
#              oversubscribed): weight sync by per-actor messages against the staged MPI
#              broadcast, 0.13M / 1.06M / 10.0M parameters, and one learner's episode intake
#   allreduce  kvrl_bench_scaling --parts allreduce (MpiCommunicator's gradient mean), 2 ranks
#              on 2 fake hosts, both hosts' egress shaped to 100mbit, then to 1gbit (shaping
#              is egress-only); kvrl_bench_collectives measures the same but can fall out of
#              step across hosts (MPI_ERR_TRUNCATE in its repeat loop's MPI_Bcast)
#   learning   kvrl train configs/cartpole_ppo.yaml learners=2 with 4 ranks on 3 fake hosts
#              (--map-by node: the two learners on different hosts), unshaped and with 20 ms
#              added to every host's egress, same seed, N env steps (500000, the budget of
#              tests/integration/test_learning_mpi.py, whose target is a mean return >= 450)
#   cluster-broadcast  kvrl_bench_scaling --parts broadcast with rank 0 alone on one fake
#              host and 4 actors on each of two others, every link shaped to 1gbit
# The cluster parts use scripts/cluster.sh and need root and network namespaces; without
# them they are skipped with a message. Its own cluster prefix (kvsc) keeps it apart from
# other clusters on the machine, and a trap brings the cluster down whatever happens.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
out=bench/results/scaling_bench.json
parts=single,allreduce,learning,cluster-broadcast
repeats=7
steps=500000
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2 ;;
    --parts) parts=$2 ;;
    --repeats) repeats=$2 ;;
    --steps) steps=$2 ;;
    *)
      sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
      exit 2
      ;;
  esac
  shift 2
done

export KVRL_CLUSTER_PREFIX=${KVRL_CLUSTER_PREFIX:-kvsc}
export KVRL_CLUSTER_STATE=${KVRL_CLUSTER_STATE:-/tmp/$KVRL_CLUSTER_PREFIX-cluster}
CLUSTER=scripts/cluster.sh
WORK=$(mktemp -d /tmp/kvrl-scaling.XXXXXX)
cluster_is_mine=0
started=0 # results are written (from the trap) once a part has begun
cleanup() {
  [ "$cluster_is_mine" = 1 ] && "$CLUSTER" down >/dev/null 2>&1
  [ "$started" = 1 ] && { write_results || echo "scaling_bench.sh: could not write $out" >&2; }
  rm -rf "$WORK"
}
trap cleanup EXIT

wants() { [[ ",$parts," == *",$1,"* ]]; }
say() { printf '\n=== %s (load average %s)\n' "$*" "$(cut -d' ' -f1-3 /proc/loadavg)"; }

for binary in build/bench/kvrl_bench_scaling build/bench/kvrl_bench_collectives build/launch/kvrl; do
  [ -x "$binary" ] || {
    echo "scaling_bench.sh: $binary is missing: cmake --build build --target kvrl_bench_scaling kvrl_bench_collectives kvrl" >&2
    exit 2
  }
done

can_cluster() {
  [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && ip netns list >/dev/null 2>&1
}

cluster_hosts=0
cluster_up() { # HOSTS [SLOTS]
  "$CLUSTER" down >/dev/null 2>&1 || true
  cluster_is_mine=1
  cluster_hosts=$1
  "$CLUSTER" up "$@" >/dev/null
}

cluster_down() {
  "$CLUSTER" down >/dev/null
  cluster_is_mine=0
}

shape_all() { # DELAY RATE on every host's egress
  local i
  for ((i = 0; i < cluster_hosts; i++)); do "$CLUSTER" shape "h$i" "$1" "$2" 0 >/dev/null; done
}

run_single() {
  local actors
  for actors in 2 4 8 16; do
    say "single host: rank 0 + $actors actors"
    timeout -k 10 1200 launch/kvrl-mpirun -np $((actors + 1)) build/bench/kvrl_bench_scaling \
      --repeats "$repeats" --json "$WORK/single_$actors.json"
  done
}

run_allreduce() {
  cluster_up 2 1
  local rate
  for rate in 100mbit 1000mbit; do
    shape_all 0 "$rate"
    say "gradient all-reduce across 2 hosts, egress $rate"
    timeout -k 10 900 "$CLUSTER" run -np 2 --map-by node build/bench/kvrl_bench_scaling --parts allreduce \
      --repeats "$repeats" --link-mbit "${rate%mbit}" --json "$WORK/allreduce_$rate.json"
  done
  cluster_down
}

# One training run on the cluster; writes learning_NAME.json from its rank0.json and the
# first update whose mean return reached 450 (metrics.jsonl).
train_once() {
  local name=$1 dir=$KVRL_CLUSTER_STATE/shared/runs/$1
  say "training across 3 hosts: $name"
  local start=$SECONDS
  timeout -k 10 1500 "$CLUSTER" run -np 4 --map-by node build/launch/kvrl train configs/cartpole_ppo.yaml \
    learners=2 run.seed=1 "run.total_env_steps=$steps" "run.dir=$dir" 2>&1 | tail -3
  jq -n --arg name "$name" --argjson end_to_end_s $((SECONDS - start)) \
    --slurpfile rank0 "$dir/rank0.json" --slurpfile curve <(jq -c . "$dir/metrics.jsonl") '
      ($curve | map(select(.["episode/return_mean"] >= 450)) | first) as $hit |
      {name: $name, end_to_end_s: $end_to_end_s, env_steps: $rank0[0].env_steps,
       updates: $rank0[0].updates, wall_seconds: $rank0[0].wall_seconds,
       mean_return: $rank0[0].mean_return, lag_mean: $rank0[0].lag_mean,
       first_450: (if $hit then {update: $hit.update, env_steps: $hit.env_steps,
                                 wall_seconds: $hit.wall_seconds} else null end)}' \
    >"$WORK/learning_$name.json"
  cat "$WORK/learning_$name.json"
}

run_learning() {
  cluster_up 3
  train_once unshaped
  shape_all 20ms 0
  train_once delay_20ms
  cluster_down
}

run_cluster_broadcast() {
  cluster_up 3 4
  shape_all 0 1gbit
  say "weight sync across 3 hosts at 1gbit: rank 0 alone on ${KVRL_CLUSTER_PREFIX}-h0, 4 actors on each of h1, h2"
  timeout -k 10 1200 "$CLUSTER" run -np 9 --host "$KVRL_CLUSTER_PREFIX-h0:1,$KVRL_CLUSTER_PREFIX-h1:4,$KVRL_CLUSTER_PREFIX-h2:4" \
    build/bench/kvrl_bench_scaling --parts broadcast --repeats "$repeats" --json "$WORK/cluster_broadcast.json"
  cluster_down
}

collect() { # the JSON files matching a glob, as one array ([] when none)
  # shellcheck disable=SC2206 # the glob is meant to expand
  local files=("$WORK"/$1)
  if [ -e "${files[0]}" ]; then jq -s "$2" "${files[@]}"; else echo '[]'; fi
}
# Whatever parts finished, also after a failed one (called from the trap).
write_results() {
  mkdir -p "$(dirname "$out")"
  jq -n --arg date "$(date -u +%FT%TZ)" --arg commit "$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
    --argjson cores "$(nproc)" --arg parts "$parts" \
    --argjson single "$(collect 'single_*.json' 'sort_by(.actors)')" \
    --argjson allreduce "$(collect 'allreduce_*.json' .)" --argjson learning "$(collect 'learning_*.json' .)" \
    --argjson cluster "$(collect cluster_broadcast.json .)" \
    '{date: $date, commit: $commit, cores: $cores, parts: ($parts | split(",")), single: $single,
      allreduce: $allreduce, learning: $learning, cluster_broadcast: $cluster}' >"$out"
  echo "wrote $out"
}

started=1
wants single && run_single
for part in allreduce learning cluster-broadcast; do
  wants "$part" || continue
  if ! can_cluster; then
    echo "scaling_bench.sh: skipping $part: the fake cluster needs root and network namespaces (scripts/cluster.sh)"
    continue
  fi
  "run_${part//-/_}"
done

