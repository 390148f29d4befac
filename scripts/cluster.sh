#!/usr/bin/env bash
# A fake multi-node cluster on one Linux machine, for running kvrl across hosts under
# Open MPI 4.1 (docs/multinode.md). Each host is a network namespace with its own
# hostname, /dev/shm and /tmp, plugged through a veth pair into a bridge that lives in a
# head namespace, where mpirun runs. mpirun's rsh launcher calls this script ("agent") in
# place of ssh, so every host runs an orted of its own and ranks on different hosts can
# only reach each other over TCP.
#
#   scripts/cluster.sh up N [SLOTS]    N hosts PREFIX-h0 ... with SLOTS slots each (2)
#   scripts/cluster.sh run ARGS...     launch/kvrl-mpirun --hostfile <the hosts> ARGS...
#   scripts/cluster.sh mpirun ARGS...  plain mpirun --hostfile <the hosts> ARGS...
#   scripts/cluster.sh probe [MPIRUN_ARGS...] -- where | pingpong BYTES REPS | stream MIB | loop S
#                                      run scripts/cluster/mpi_probe.c (compiled on first use)
#   scripts/cluster.sh exec HOST CMD...     a command on HOST (its network, hostname, /tmp)
#   scripts/cluster.sh shape HOST DELAY RATE LOSS   HOST's egress, e.g. 5ms 100mbit 5%; 0 = off
#   scripts/cluster.sh unshape HOST
#   scripts/cluster.sh cut HOST | heal HOST   unplug HOST's cable (carrier loss) | plug it in
#   scripts/cluster.sh partition A B | unpartition A B   A and B lose each other (both
#                                      ways) while both still reach mpirun and the rest
#   scripts/cluster.sh kill HOST       SIGKILL every process on HOST, as a crash would
#   scripts/cluster.sh status          hosts, links, shaping, processes, TCP counters
#   scripts/cluster.sh check           prove it is multi-node: TCP across hosts, shared
#                                      memory within one, local ranks per host (brings a
#                                      3-host cluster up and down when none is up)
#   scripts/cluster.sh down            kill every process on the cluster, remove its
#                                      namespaces and bridge; safe to call at any time
#   scripts/cluster.sh agent HOST CMD  the rsh agent that mpirun calls
# HOST is PREFIX-hI, hI or I. Tests should call `down` from a trap: it works after a failed
# `up`, a killed run or a cut host, and when nothing is up.
#
# Environment:
#   KVRL_CLUSTER_PREFIX       names of namespaces and hosts (kvrl): clusters with other
#                             prefixes can run side by side
#   KVRL_CLUSTER_STATE        hostfile, per-host /tmp, logs, compiled helpers
#                             (/tmp/PREFIX-cluster), and shared/, which every host sees
#                             at the same path, as a shared file system; `down` keeps
#                             bin/, log/ and shared/, `up` empties log/ and shared/
#   KVRL_CLUSTER_PRIVATE_TMP  1 (default): each host's /tmp is STATE/hosts/HOST/tmp, as
#                             node-local disks are; 0: hosts share the machine's /tmp
#   KVRL_CLUSTER_SEED         seed of the loss pattern (1)
# Needs root, iproute2 (ip, tc), util-linux (unshare, flock), cc and mpicc. Changes
# nothing outside the namespaces and STATE except /run/netns entries, which `down` removes.
#
# What was learned from the sketch in /work/shared/simcluster, and kept here:
# - Open MPI decides "same node" from its job map, not from gethostname(), but it names
#   vader segments /dev/shm/vader_segment.<hostname>.* and session dirs after the
#   hostname: hosts that share both segfault in vader. Hence a UTS namespace per host
#   (unshare --uts) and a private /dev/shm.
# - A bridge takes its lowest port's MAC and changes it when ports come and go (shaping
#   does), which would leave every host with a stale ARP entry for mpirun: fixed MAC.
# - With the default OOB keepalive (300 s + 9 x 20 s) a cut host hangs a job for 8 min;
#   4 s + 3 x 2 s ends it in about 10 s and survives a 3 s flap.
# - Every fake host sees the same cores; the default binding pins local rank 0 of every
#   host onto core 0 (a 1 MiB ping-pong took 10 times longer): binding none.
# - MCA defaults go in as OMPI_MCA_* variables, not --mca, so `--mca NAME` on the command
#   line overrides them (Open MPI refuses a parameter named twice on the command line).
set -euo pipefail
SELF=$(readlink -f "${BASH_SOURCE[0]}")
SCRIPTS=$(dirname "$SELF")
REPO=$(dirname "$SCRIPTS")
PREFIX=${KVRL_CLUSTER_PREFIX:-kvrl}
STATE=${KVRL_CLUSTER_STATE:-/tmp/$PREFIX-cluster}
PRIVATE_TMP=${KVRL_CLUSTER_PRIVATE_TMP:-1}
HEAD=$PREFIX-head
BRIDGE=$PREFIX-br
SUBNET=10.86.0 # hosts .1 .. .N, the head .254; only ever inside the namespaces
BRIDGE_MAC=02:6b:76:72:6c:fe
CLEAN_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
[[ $PREFIX =~ ^[a-z][a-z0-9]{0,11}$ ]] ||
  die "KVRL_CLUSTER_PREFIX '$PREFIX' must be a lower-case letter and at most 11 more letters or digits (it names the bridge, 15 characters at most)"
# Two levels deep at least: `down` removes directories below it.
[[ $STATE =~ ^/[^/]+/[^/]+ ]] || die "KVRL_CLUSTER_STATE '$STATE' must be an absolute path two levels deep at least, like /tmp/kvrl-cluster"
[[ $PRIVATE_TMP == [01] ]] || die "KVRL_CLUSTER_PRIVATE_TMP '$PRIVATE_TMP' must be 0 or 1"

# Up, down and the link commands change shared state: one at a time, on every cluster.
# Long-lived children must not inherit the lock (9<&-). `down` goes ahead without it after
# a while, since it is what cleans up after everything else.
lock() {
  exec 9<"$SELF"
  flock -w "${1:-60}" 9 && return 0
  [ "${1:-}" = "" ] && die "another cluster.sh command has held the lock for 60 s"
  echo "cluster.sh: the lock is still held after $1 s; going ahead" >&2
}
now() { echo "${EPOCHREALTIME/./}"; } # microseconds
# Whether PID runs: a zombie does not (kill -0 says it does).
alive() { [ -e "/proc/$1" ] && [ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" != Z ]; }
elapsed_s() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", (b - a) / 1e6 }'; }
is_up() { [ -e "/run/netns/$HEAD" ]; }
require_up() { is_up || die "no cluster '$PREFIX' is up: run $0 up N"; }
# The cluster's namespaces, hosts in order, then the head.
namespaces() {
  ip netns list | awk -v p="$PREFIX" '$1 ~ "^" p "-h[0-9]+$" { print $1 }' | sort -V
  if is_up; then echo "$HEAD"; fi
}
hosts() { namespaces | grep -v -x "$HEAD" || true; }

# Sets HOST (the namespace and hostname) and PORT (its end on the bridge) from HOST, hI or I.
resolve_host() {
  local name=$1
  require_up
  case $name in
    [0-9]*) name=$PREFIX-h$name ;;
    h[0-9]*) name=$PREFIX-$name ;;
  esac
  [[ $name =~ ^$PREFIX-h([0-9]+)$ ]] && [ -e "/run/netns/$name" ] ||
    die "no host '$1' in cluster '$PREFIX' (hosts: $(hosts | tr '\n' ' '))"
  HOST=$name
  PORT=h${name##*-h}
}

# Runs CMD... as host NS sees the world: its network, hostname, /dev/shm and /tmp. ENV is
# "login" for a clean environment, as ssh would give orted, or "keep". Does not return.
enter() {
  local ns=$1 env_mode=$2
  shift 2
  exec ip netns exec "$ns" unshare --uts -- "$SELF" _host_init "$ns" "$env_mode" "$@"
}

# The second half of enter, inside the namespaces. `ip netns exec` already gave this
# process a mount namespace of its own (a slave of the machine's), so these mounts are
# private to this host's processes and vanish with them.
host_init() {
  local ns=$1 env_mode=$2 tmp=$STATE/hosts/$1/tmp tmpdir
  shift 2
  hostname "$ns"
  mount -t tmpfs -o mode=1777 "$PREFIX-shm" /dev/shm
  if [ "$PRIVATE_TMP" = 1 ]; then
    # The state dir and the checkout stay visible at their own paths inside the host's own
    # /tmp (the hostfile, the compiled helpers, kvrl and its build, as a shared home or an
    # NFS-mounted install would be): a checkout under /tmp (a CI clone) must run too.
    local shared
    for shared in "$STATE" "$REPO"; do
      if [[ $shared == /tmp/* ]]; then mount --bind "$shared" "$tmp/${shared#/tmp/}"; fi
    done
    mount --rbind "$tmp" /tmp
    tmpdir=/tmp
  else
    tmpdir=$tmp # session dirs where `down` removes them
  fi
  if [ "$env_mode" = login ]; then
    exec env -i PATH="$CLEAN_PATH" HOME="${HOME:-/root}" USER="$(id -un)" LOGNAME="$(id -un)" SHELL=/bin/sh \
      TMPDIR="$tmpdir" "$@"
  fi
  export TMPDIR=$tmpdir
  exec "$@"
}

# Compiles scripts/cluster/NAME.c with COMPILER into STATE/bin when missing or older than
# its source; prints the binary's path.
build_helper() {
  local name=$1 compiler=$2 source=$SCRIPTS/cluster/$1.c binary=$STATE/bin/$1
  mkdir -p "$STATE/bin"
  if [ ! -x "$binary" ] || [ "$source" -nt "$binary" ]; then
    "$compiler" -O2 -Wall -o "$binary.$$" "$source" >&2 || die "could not compile $source with $compiler"
    mv "$binary.$$" "$binary"
  fi
  echo "$binary"
}

up() {
  local count=${1:-} slots=${2:-2} start i ns
  [[ $count =~ ^[1-9][0-9]*$ ]] && [ "$count" -le 200 ] || die "up: N '$count' must be a number of hosts in [1, 200]"
  [[ $slots =~ ^[1-9][0-9]*$ ]] || die "up: SLOTS '$slots' must be a positive number of slots per host"
  lock
  is_up && die "cluster '$PREFIX' is already up ($(hosts | wc -l) hosts): run $0 down first"
  start=$(now)
  # A failure part-way leaves nothing standing either.
  trap 'echo "cluster.sh: up failed; tearing down what was built" >&2; teardown >&2' EXIT
  rm -rf "$STATE/hosts" "$STATE/links" "$STATE/log" "$STATE/shared" "$STATE/hostfile"
  mkdir -p "$STATE/links" "$STATE/log" "$STATE/shared"
  : >"$STATE/hostfile"
  add_namespace "$HEAD"
  ip -n "$HEAD" link add "$BRIDGE" address "$BRIDGE_MAC" type bridge
  ip -n "$HEAD" addr add "$SUBNET.254/24" dev "$BRIDGE"
  ip -n "$HEAD" link set "$BRIDGE" up
  for ((i = 0; i < count; i++)); do
    ns=$PREFIX-h$i
    add_namespace "$ns"
    ip -n "$HEAD" link add "h$i" type veth peer name eth0 netns "$ns"
    ip -n "$HEAD" link set "h$i" master "$BRIDGE" up
    ip -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    echo "$ns slots=$slots" >>"$STATE/hostfile"
  done
  trap - EXIT
  echo "cluster.sh: up: $count hosts ($PREFIX-h0..$PREFIX-h$((count - 1)), $slots slots each) in $(elapsed_s "$start") s; hostfile $STATE/hostfile"
}

add_namespace() {
  local ns=$1 tmp=$STATE/hosts/$1/tmp
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  # IPv4 only: Open MPI would also open IPv6 listeners on every interface.
  ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
  mkdir -p "$tmp"
  local shared
  for shared in "$STATE" "$REPO"; do
    if [[ $shared == /tmp/* ]]; then mkdir -p "$tmp/${shared#/tmp/}"; fi
  done
  chmod 1777 "$tmp"
}

# Kills everything on the cluster, removes its namespaces (the veth pairs and the bridge go
# with them) and its run-time state. Prints what it did; fails if anything is left.
teardown() {
  local start ns pid spaces killed=() left zombies=()
  start=$(now)
  mapfile -t spaces < <(namespaces) # hosts without a head too, after a failed `up`
  # Kill until no namespace holds a process: one that forks while dying is caught next time.
  for _ in $(seq 100); do
    left=0
    for ns in "${spaces[@]}"; do
      for pid in $(ip netns pids "$ns"); do
        kill -9 "$pid" 2>/dev/null && killed+=("$pid")
        left=1
      done
    done
    [ "$left" = 0 ] && break
    sleep 0.05
  done
  # A killed process drops out of its namespace before it is gone: wait for the pids too,
  # so that a `pgrep orted` right after `down` finds nothing.
  for pid in "${killed[@]}"; do
    for _ in $(seq 100); do
      alive "$pid" || break
      sleep 0.02
    done
  done
  # Orphans are reaped by PID 1, which on some machines takes a while (1.5 s on a
  # Firecracker guest): wait for that too, for the processes killed here and for orted and
  # ranks that exited by themselves just before.
  for _ in $(seq 150); do
    zombies=()
    for pid in "${killed[@]}"; do [ -e "/proc/$pid" ] && zombies+=("$pid"); done
    mapfile -t -O "${#zombies[@]}" zombies < <(ps -eo pid=,ppid=,stat=,comm= |
      awk '$2 == 1 && $3 ~ /^Z/ && $4 ~ /^(orted|mpirun|kvrl|mpi_probe|link_shaper)$/ { print $1 }')
    [ ${#zombies[@]} = 0 ] && break
    sleep 0.02
  done
  for ns in "${spaces[@]}"; do ip netns del "$ns"; done
  rm -rf "$STATE/hosts" "$STATE/links" "$STATE/hostfile"
  left=$(namespaces | tr '\n' ' ')
  [ -z "$left" ] || die "down: namespaces left: $left"
  echo "cluster.sh: down: removed ${#spaces[@]} namespaces, killed ${#killed[@]} processes in $(elapsed_s "$start") s"
  # Dead, but not yet reaped by a parent outside the cluster (the caller's shell, say).
  [ ${#zombies[@]} = 0 ] || echo "cluster.sh: down: dead processes not yet reaped by their parent: ${zombies[*]}" >&2
}

down() {
  lock 10
  teardown
}

# Defaults for a job on the fake hosts; a variable already set, or --mca on the line, wins.
mca_defaults() {
  local setting name
  for setting in "plm_rsh_agent=$SELF agent" plm_rsh_no_tree_spawn=1 \
    oob_tcp_if_include=$SUBNET.0/24 btl_tcp_if_include=$SUBNET.0/24 \
    oob_tcp_keepalive_time=4 oob_tcp_keepalive_intvl=2 oob_tcp_keepalive_probes=3 \
    hwloc_base_binding_policy=none mpi_yield_when_idle=1; do
    name=OMPI_MCA_${setting%%=*}
    [ -n "${!name+set}" ] || export "$name=${setting#*=}"
  done
  export KVRL_CLUSTER_PREFIX=$PREFIX KVRL_CLUSTER_STATE=$STATE KVRL_CLUSTER_PRIVATE_TMP=$PRIVATE_TMP
}

run() {
  require_up
  mca_defaults
  enter "$HEAD" keep "$REPO/launch/kvrl-mpirun" --hostfile "$STATE/hostfile" "$@"
}

plain_mpirun() {
  require_up
  mca_defaults
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  enter "$HEAD" keep mpirun --hostfile "$STATE/hostfile" "$@"
}

probe() {
  local launch=() probe_binary
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    launch+=("$1")
    shift
  done
  [ $# -gt 0 ] || die "probe: say what to probe after --, e.g. $0 probe -np 4 -- where"
  shift
  probe_binary=$(build_helper mpi_probe mpicc)
  run "${launch[@]}" "$probe_binary" "$@"
}

# Called by mpirun as it would call ssh: agent HOST ORTED_COMMAND_LINE (already quoted for
# a shell). orted gets a login environment, as over ssh: only what mpirun puts on its
# command line or forwards (OMPI_*, -x NAME) reaches the ranks.
agent() {
  [ $# -ge 2 ] || die "agent: usage: agent HOST COMMAND"
  resolve_host "$1"
  shift
  echo "$(date +%T.%N) $HOST: $*" >>"$STATE/log/agent.log"
  enter "$HOST" login sh -c "$*"
}

host_exec() {
  [ $# -ge 2 ] || die "exec: usage: exec HOST COMMAND..."
  resolve_host "$1"
  shift
  enter "$HOST" keep "$@"
}

to_microseconds() {
  [[ $1 == 0 || $1 =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "shape: DELAY '$1' must be 0 or a time like 200us, 5ms or 1s"
  awk -v v="$1" 'BEGIN { m = v ~ /us$/ ? 1 : v ~ /ms$/ ? 1e3 : 1e6; printf "%d", v * m }'
}

shape() {
  [ $# -eq 4 ] || die "shape: usage: shape HOST DELAY RATE LOSS, e.g. shape h2 5ms 100mbit 5% (0 turns one off)"
  resolve_host "$1"
  local delay_us rate=$3 loss=${4%\%} burst shaper log pid
  delay_us=$(to_microseconds "$2")
  [[ $rate == 0 || $rate =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$ ]] || die "shape: RATE '$rate' must be 0 or a rate like 100mbit or 1gbit"
  [[ $loss =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk -v l="$loss" 'BEGIN { exit !(l <= 100) }' ||
    die "shape: LOSS '$4' must be a percentage in [0, 100], like 5%"
  lock
  unshape_locked
  if [ "$rate" != 0 ]; then
    # The bucket holds 2 ms at the rate (16 KiB at least); 50 ms of queue behind it.
    burst=$(awk -v r="$rate" 'BEGIN { m = r ~ /gbit$/ ? 1e9 : r ~ /mbit$/ ? 1e6 : r ~ /kbit$/ ? 1e3 : 1
                                      b = r * m / 8 * 0.002; printf "%d", b < 16384 ? 16384 : b }')
    tc -n "$HOST" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
  fi
  if [ "$delay_us" != 0 ] || [ "$loss" != 0 ]; then
    shaper=$(build_helper link_shaper cc)
    log=$STATE/log/$HOST.shaper.log
    # One segment per frame when frames are lost, so that loss hits TCP segments the way a
    # lossy wire would, not 64 KiB GSO frames at a time.
    if [ "$loss" != 0 ]; then ip -n "$HOST" link set eth0 gso_max_segs 1; fi
    ip -n "$HEAD" link add "${PORT}s" type veth peer name "${PORT}b"
    ip -n "$HEAD" link set "${PORT}b" master "$BRIDGE" up
    ip -n "$HEAD" link set "${PORT}s" up
    # Real-time priority: with both cores busy the sketch measured a 5 ms line at 8 ms.
    # The shaper outlives this script: it must not hold the lock (fd 9).
    local priority=(chrt -f 10)
    chrt -f 10 true 2>/dev/null || priority=()
    # ip netns exec and chrt exec without forking: $! is the shaper itself.
    ip netns exec "$HEAD" "${priority[@]}" "$shaper" "$PORT" "${PORT}s" "$delay_us" "$loss" \
      "$(( ${KVRL_CLUSTER_SEED:-1} * 1000 + ${PORT#h} ))" </dev/null >"$log" 2>&1 9<&- &
    pid=$!
    echo "$pid" >"$STATE/links/$HOST.shaper.pid"
    for _ in $(seq 100); do
      grep -q "^ready: pid=$pid " "$log" && break
      kill -0 "$pid" 2>/dev/null || { unshape_locked; die "shape: the link shaper did not start: $(tail -3 "$log")"; }
      sleep 0.02
    done
    grep -q "^ready: pid=$pid " "$log" || { unshape_locked; die "shape: the link shaper did not start within 2 s: $(tail -3 "$log")"; }
    # From here the host's frames reach the bridge only through the shaper.
    ip -n "$HEAD" link set "$PORT" nomaster
  fi
  echo "delay=$2 rate=$rate loss=$loss%" >"$STATE/links/$HOST.shape"
}

unshape() {
  [ $# -eq 1 ] || die "unshape: usage: unshape HOST"
  resolve_host "$1"
  lock
  unshape_locked
}

unshape_locked() {
  local pidfile=$STATE/links/$HOST.shaper.pid pid
  if [ -f "$pidfile" ]; then
    pid=$(cat "$pidfile")
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do
      alive "$pid" || break
      sleep 0.02
    done
    if alive "$pid"; then kill -9 "$pid" 2>/dev/null || true; fi
    rm -f "$pidfile"
  fi
  # Only once the shaper is gone: a port on the bridge that the shaper also forwards from
  # would put every frame on the bridge twice.
  ip -n "$HEAD" link del "${PORT}s" 2>/dev/null || true
  ip -n "$HEAD" link set "$PORT" master "$BRIDGE"
  tc -n "$HOST" qdisc del dev eth0 root 2>/dev/null || true
  ip -n "$HOST" link set eth0 gso_max_segs 65535
  rm -f "$STATE/links/$HOST.shape"
}

# Carrier loss on the host's eth0, as an unplugged cable; a silent partition (the link
# stays up, frames vanish) is `shape HOST 0 0 100%`.
cut() {
  resolve_host "${1:-}"
  lock
  ip -n "$HEAD" link set "$PORT" down
}

heal() {
  resolve_host "${1:-}"
  lock
  ip -n "$HEAD" link set "$PORT" up
}

# A partition Open MPI never notices: each host gets a blackhole route to the other, so
# datagrams and TCP segments between them vanish without an error on the wire, while
# both keep talking to mpirun (the head) and to every other host.
partition() {
  blackhole add "$@"
}

unpartition() {
  blackhole del "$@"
}

blackhole() {
  local action=$1 a b a_ip b_ip
  resolve_host "${2:-}"
  a=$HOST
  resolve_host "${3:-}"
  b=$HOST
  [ "$a" != "$b" ] || die "partition: '$2' and '$3' are the same host"
  a_ip=$SUBNET.$((${a##*-h} + 1))
  b_ip=$SUBNET.$((${b##*-h} + 1))
  lock
  ip -n "$a" route "$action" blackhole "$b_ip/32" 2>/dev/null || [ "$action" = del ]
  ip -n "$b" route "$action" blackhole "$a_ip/32" 2>/dev/null || [ "$action" = del ]
}

kill_host() {
  resolve_host "${1:-}"
  local pid count=0
  for pid in $(ip netns pids "$HOST"); do kill -9 "$pid" 2>/dev/null && count=$((count + 1)); done
  echo "cluster.sh: kill: $count processes on $HOST"
}

status() {
  local ns port link pids programs shaping
  if ! is_up; then
    echo "cluster '$PREFIX': down$(hosts | grep -q . && echo ", but host namespaces are left: run $0 down")"
    return 0
  fi
  echo "cluster '$PREFIX': $(hosts | wc -l) hosts, hostfile $STATE/hostfile, private /tmp $([ "$PRIVATE_TMP" = 1 ] && echo yes || echo no)"
  for ns in $(namespaces); do
    pids=$(ip netns pids "$ns" | tr '\n' ' ')
    programs=$(for pid in $pids; do cat "/proc/$pid/comm" 2>/dev/null; done | sort | uniq -c | awk '{ printf "%s%s", sep, $2 ($1 > 1 ? "x" $1 : ""); sep = " " }')
    if [ "$ns" = "$HEAD" ]; then
      echo "$ns: $SUBNET.254, runs mpirun; processes: ${programs:-none}"
      continue
    fi
    port=h${ns##*-h}
    link=$(ip -n "$HEAD" -br link show "$port" | awk '{ print $2 }')
    [ "$link" = DOWN ] && link="DOWN (cut)"
    shaping=$(cat "$STATE/links/$ns.shape" 2>/dev/null || echo "unshaped")
    echo "$ns: $SUBNET.$((${ns##*-h} + 1)) link $link, $shaping; processes: ${programs:-none}"
    # Counters of the host's own TCP stack: retransmissions show loss.
    ip netns exec "$ns" awk '/^Tcp:/ { if (!n++) split($0, k); else for (i = 2; i <= NF; i++) v[k[i]] = $i }
      END { printf "  tcp out_segs=%d retrans_segs=%d\n", v["OutSegs"], v["RetransSegs"] }' /proc/net/snmp
    if [ -f "$STATE/links/$ns.shaper.pid" ]; then
      kill -USR1 "$(cat "$STATE/links/$ns.shaper.pid")" 2>/dev/null && sleep 0.05
      echo "  shaper $(grep '^counters:' "$STATE/log/$ns.shaper.log" | tail -1)"
    fi
  done
}

# --- check: is the cluster really multi-node? -------------------------------------------

check() {
  local owned=0 hostcount slots np out rc failures=0 start unreachable
  start=$(now)
  if ! is_up; then
    "$SELF" up 3 2
    owned=1
    trap '"$SELF" down' EXIT
  fi
  hostcount=$(hosts | wc -l)
  slots=$(awk -F'slots=' 'NR == 1 { print $2 }' "$STATE/hostfile")
  np=$((hostcount * slots < 5 ? hostcount * slots : 5))
  [ "$hostcount" -ge 2 ] && [ "$slots" -ge 2 ] || die "check: needs 2 hosts or more with 2 slots or more (up 3 2)"
  build_helper mpi_probe mpicc >/dev/null

  # 1. Default transports (kvrl-mpirun's, with a hostfile): every pair of ranks on two hosts
  # uses tcp, every pair on one host vader; local ranks and node sizes are per host; the
  # agent's environment is an ssh login's, so a variable of the caller does not leak.
  rc=0
  out=$(PROBE_ENV_MARKER=1 timeout -k 5 120 "$SELF" probe -np "$np" --mca btl_base_verbose 10 -- where 2>&1) || rc=$?
  echo "$out" >"$STATE/log/check-where.log"
  if [ "$rc" != 0 ]; then
    echo "FAIL where: exit $rc ($STATE/log/check-where.log)"
    failures=$((failures + 1))
  else
    echo "$out" | check_where "$np" || failures=$((failures + 1))
  fi

  # 2. Shared memory alone cannot join two hosts...
  rc=0
  out=$(timeout -k 5 120 "$SELF" probe -np "$np" --mca btl self,vader -- where 2>&1) || rc=$?
  echo "$out" >"$STATE/log/check-vader-across.log"
  # Open MPI names the pair it could not join: "Process 1 ([[J,1],R]) is on host: H", the
  # same for process 2, then "BTLs attempted: ...". The two hosts must differ.
  unreachable=$(awk '/Process [12] \(\[\[.*is on host:/ { rank = $3; gsub(/.*,|\]\)/, "", rank); h[++n] = $NF; r[n] = rank }
                     /BTLs attempted:/ && n == 2 && h[1] != h[2] { sub(/^ */, ""); printf "rank %s on %s and rank %s on %s unreachable, %s", r[1], h[1], r[2], h[2], $0; exit }' <<<"$out")
  if [ "$rc" != 0 ] && { [[ $unreachable == *vader* ]] || grep -q "unable to reach each other" <<<"$out"; }; then
    echo "ok   --mca btl self,vader across hosts fails (exit $rc): ${unreachable:-"MPI processes are unable to reach each other"}"
  else
    echo "FAIL --mca btl self,vader across hosts: exit $rc, expected a failure naming vader ($STATE/log/check-vader-across.log)"
    failures=$((failures + 1))
  fi
  # 3. ...but does join two ranks on one host, so (2) failed for the host boundary alone.
  rc=0
  out=$(timeout -k 5 120 "$SELF" probe -np 2 --host "$PREFIX-h0:2" --mca btl self,vader -- where 2>&1) || rc=$?
  echo "$out" >"$STATE/log/check-vader-within.log"
  if [ "$rc" = 0 ] && [ "$(grep -c "host=$PREFIX-h0 .*shm_size=2" <<<"$out")" = 2 ]; then
    echo "ok   --mca btl self,vader within $PREFIX-h0 works (2 ranks, one node)"
  else
    echo "FAIL --mca btl self,vader within one host: exit $rc ($STATE/log/check-vader-within.log)"
    failures=$((failures + 1))
  fi
  if [ "$failures" = 0 ]; then
    echo "check: PASS ($hostcount hosts, $np ranks, $(elapsed_s "$start") s)"
  else
    echo "check: FAIL ($failures of 3 failed; logs in $STATE/log)"
  fi
  [ "$owned" = 1 ] || return "$((failures > 0))"
  [ "$failures" = 0 ] # the EXIT trap brings the cluster down either way
}

# Reads the output of `probe -np NP --mca btl_base_verbose 10 -- where` and checks it.
check_where() {
  awk -v np="$1" -v prefix="$PREFIX" '
    /^probe where / {
      for (i = 3; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
      r = f["rank"]; ranks++; host[r] = f["host"]
      on[f["host"]]++
      if (f["host"] !~ "^" prefix "-h[0-9]+$") bad = bad sprintf("rank %d runs on %s, not a fake host; ", r, f["host"])
      if (f["processor"] != f["host"]) bad = bad sprintf("rank %d: MPI names its node %s, the OS %s; ", r, f["processor"], f["host"])
      if (f["marker"] != 0) bad = bad sprintf("rank %d sees the caller'"'"'s environment (the agent should not pass it); ", r)
      local_rank[r] = f["local_rank"]; local_size[r] = f["local_size"]; shm[r] = f["shm_size"]
    }
    # [host:pid] mca: bml: Using BTL btl for send to [[job,1],PEER] on node NODE
    / mca: bml: Using [a-z]+ btl for send to / {
      sender = $1; sub(/^\[/, "", sender); sub(/:.*/, "", sender)
      btl = $0; sub(/.* Using /, "", btl); sub(/ btl.*/, "", btl)
      node = $NF
      pair = sender " " $(NF - 3)
      if (btl == "self") next
      if (sender != node) { across[btl]++; if (btl != "tcp") bad = bad "vader or other non-tcp across hosts: " $0 "; " }
      else { within[btl]++; if (btl != "vader") bad = bad "not vader within a host: " $0 "; " }
    }
    END {
      if (ranks != np) bad = bad sprintf("%d of %d ranks reported; ", ranks, np)
      for (r = 0; r < ranks; r++) {
        h = host[r]
        if (local_size[r] != on[h] || shm[r] != on[h])
          bad = bad sprintf("rank %d on %s: local size %s, shared-memory size %s, but %d ranks run there; ", r, h, local_size[r], shm[r], on[h])
        if (seen[h, local_rank[r]]++ || local_rank[r] < 0 || local_rank[r] >= on[h])
          bad = bad sprintf("rank %d on %s has local rank %s; ", r, h, local_rank[r])
      }
      for (h in on) { hostcount++; layout = layout sprintf("%s%s: %d", layout ? ", " : "", h, on[h]) }
      # Every ordered pair across hosts, and within one, named its BTL.
      for (r = 0; r < ranks; r++) for (s = 0; s < ranks; s++) if (r != s) { if (host[r] != host[s]) want_across++; else want_within++ }
      if (hostcount < 2) bad = bad "all ranks on one host; "
      if (across["tcp"] != want_across) bad = bad sprintf("%d tcp pairs across hosts logged, %d expected; ", across["tcp"], want_across)
      if (within["vader"] != want_within) bad = bad sprintf("%d vader pairs within hosts logged, %d expected; ", within["vader"], want_within)
      if (bad != "") { print "FAIL where: " bad; exit 1 }
      printf "ok   %d ranks on %d hosts (%s): local ranks 0..k-1 and node sizes per host, hostnames per host, caller environment not leaked\n", ranks, hostcount, layout
      printf "ok   btl_base_verbose: %d pairs across hosts all tcp, %d pairs within a host all vader\n", want_across, want_within
    }'
}

cmd=${1:-}
shift || true
case $cmd in
  up | down | run | probe | agent | shape | unshape | cut | heal | partition | unpartition | status | check)
    "$cmd" "$@" ;;
  mpirun) plain_mpirun "$@" ;;
  exec) host_exec "$@" ;;
  kill) kill_host "$@" ;;
  _host_init) host_init "$@" ;;
  *)
    sed -n '2,/^# Needs root/p' "$SELF" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = help ] || [ "$cmd" = --help ] || exit 2
    ;;
esac
