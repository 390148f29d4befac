"""Network faults under kvrl train across the fake cluster's hosts (scripts/cluster.sh,
docs/multinode.md, "Network faults"), with kvrl-mpirun's and kvrl's defaults: Open MPI's
OOB keepalive as kvrl-mpirun sets it across hosts, and run.peer_timeout_s = 30.

3 hosts, 5 ranks mapped by node: learner 0 and actor 3 on h0, learner 1 and actor 4 on h1,
actor 2 alone on h2. Each fault but the packet loss must end the job with every rank on
every host gone within 60 s of the fault, a message naming the lost host or rank, and a
checkpoint from which --resume (the network restored) finishes the run:
- h2's cable cut (an actor host), h1's cable cut (a learner host), h2's processes killed;
- h0 and h1 losing each other while both still reach mpirun and h2: Open MPI never notices
  this one, kvrl's heartbeats do.
5% packet loss on every host's egress must not end the run: it finishes, every episode
accounted for.
"""
import json
import re
import subprocess
import time

import pytest

from conftest import CARTPOLE_PPO, CLUSTER_SH, KVRL, clean_stderr

RANKS = 5
LAYOUT = ["--map-by", "node"]  # rank r on host r % 3
TRAIN = [f"{CARTPOLE_PPO}", "learners=2", "learner.steps_per_update=512", "actor.credit_steps=512",
         "run.total_env_steps=100000000", "checkpoint.interval_updates=2", "run.log_interval_s=1"]
ALL_GONE_WITHIN_S = 60


def start_training(cluster, run_dir, *extra):
    """kvrl train through scripts/cluster.sh run, in the background."""
    command = ["timeout", "-k", "5", "240", str(CLUSTER_SH), "run", "-x", "OMP_NUM_THREADS", "-np", str(RANKS),
               *LAYOUT, KVRL, "train", *TRAIN, f"run.dir={run_dir}", *extra]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cluster.env)


def checkpoint_updates(run_dir):
    folder = run_dir / "checkpoints"
    names = sorted(p.name for p in folder.glob("checkpoint-*.pt")) if folder.is_dir() else []
    return [int(name.split("-")[1].split(".")[0]) for name in names]


def wait_for_checkpoints(process, run_dir, count=2, limit_s=120):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and process.poll() is None:
        if len(checkpoint_updates(run_dir)) >= count:
            return
        time.sleep(0.5)
    out, err = process.communicate(timeout=30) if process.poll() is not None else ("", "")
    raise AssertionError(f"no {count} checkpoints after {limit_s} s (exit {process.poll()}):\n{err[-3000:]}")


def kvrl_ranks(cluster):
    """Host -> pids of kvrl processes in that host's network namespace."""
    ranks = {}
    for host in cluster.hosts:
        listed = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True).stdout.split()
        alive = []
        for pid in listed:
            try:
                with open(f"/proc/{pid}/comm") as comm:
                    if comm.read().strip() == "kvrl":
                        alive.append(int(pid))
            except OSError:
                pass
        ranks[host] = alive
    return ranks


def seconds_until_every_rank_is_gone(cluster, process, since, limit_s=ALL_GONE_WITHIN_S + 30):
    """Waits for the job to end and for every kvrl rank on every host to be gone; returns the
    seconds from `since` and the job's output."""
    out, err = process.communicate(timeout=limit_s)
    while time.monotonic() - since < limit_s and any(kvrl_ranks(cluster).values()):
        time.sleep(0.25)
    left = {host: pids for host, pids in kvrl_ranks(cluster).items() if pids}
    assert not left, f"kvrl ranks still running {time.monotonic() - since:.0f} s after the fault: {left}"
    return time.monotonic() - since, out, clean_stderr(err)


def resume_finishes(cluster, run_dir):
    last = checkpoint_updates(run_dir)[-1]
    result = cluster.run("-np", RANKS, *LAYOUT, KVRL, "train", "--resume", str(run_dir),
                         f"run.max_updates={last + 2}", timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "kvrl train: finished:" in result.stdout
    learners = [json.load(open(run_dir / f"rank{r}.json")) for r in (0, 1)]
    # The newest checkpoint was intact: both learners resumed from it, not from an older one.
    assert all(l["resumed_from_update"] == last and l["updates"] == last + 2 for l in learners), learners
    assert learners[0]["parameter_checksum"] == learners[1]["parameter_checksum"]


@pytest.mark.parametrize("fault,host,lost", [
    ("cut", "h2", "h2"),   # an actor's host
    ("cut", "h1", "h1"),   # a learner's host
    ("kill", "h2", "h2"),  # a host's processes die
])
def test_a_lost_host_ends_the_job_everywhere_within_a_minute_and_resume_finishes(cluster, fault, host, lost):
    run_dir = cluster.shared / "run"
    process = start_training(cluster, run_dir)
    wait_for_checkpoints(process, run_dir)
    before = checkpoint_updates(run_dir)
    fault_at = time.monotonic()
    cluster.script(fault, host)
    seconds, out, err = seconds_until_every_rank_is_gone(cluster, process, fault_at)
    print(f"\n{fault} {host}: every rank gone after {seconds:.1f} s, exit {process.returncode}")
    assert process.returncode != 0, err[-3000:]
    print("\n".join(err.splitlines()[-12:]))
    assert f"kvrl-mpirun: lost host {cluster.name}-{lost} " in err, err[-3000:]
    assert seconds <= ALL_GONE_WITHIN_S, f"{seconds:.0f} s"
    # Training may go on until the job ends; checkpoints only move forward. resume_finishes
    # checks that the newest one loads (a resume skips a damaged one, naming it).
    assert checkpoint_updates(run_dir)[-1] >= before[-1]
    if fault == "cut":
        cluster.script("heal", host)
    resume_finishes(cluster, run_dir)


def test_two_hosts_that_lose_each_other_end_the_job_by_heartbeat_naming_the_silent_peers(cluster):
    """h0 and h1 (the learners' hosts) lose each other; both still reach mpirun and h2. Open
    MPI's runtime sees nothing, and learner 0 would wait in the gradient all-reduce for ever."""
    run_dir = cluster.shared / "run"
    process = start_training(cluster, run_dir)
    wait_for_checkpoints(process, run_dir)
    fault_at = time.monotonic()
    cluster.script("partition", "h0", "h1")
    seconds, out, err = seconds_until_every_rank_is_gone(cluster, process, fault_at)
    print(f"\npartition h0 h1: every rank gone after {seconds:.1f} s, exit {process.returncode}")
    assert process.returncode == 4, err[-3000:]
    assert "lost contact with" in err and "(run.peer_timeout_s = 30.0)" in err, err[-3000:]
    # The silent peers are named with their hosts: a rank on h0 names one on h1, or the reverse.
    h0, h1 = cluster.hosts[0], cluster.hosts[1]
    named = [line for line in err.splitlines() if "lost contact with" in line]
    assert any((f"on {h0})" in line.split("lost contact with")[0] and f"on {h1})" in line.split("lost contact with")[1])
               or (f"on {h1})" in line.split("lost contact with")[0] and f"on {h0})" in line.split("lost contact with")[1])
               for line in named), named
    assert seconds <= ALL_GONE_WITHIN_S, f"{seconds:.0f} s"
    cluster.script("unpartition", "h0", "h1")
    resume_finishes(cluster, run_dir)


def test_five_percent_packet_loss_on_every_host_slows_the_run_but_it_finishes(cluster):
    for host in cluster.hosts:
        cluster.script("shape", host, "0", "0", "5%")
    run_dir = cluster.shared / "lossy"
    result = cluster.run("-np", RANKS, *LAYOUT, KVRL, "train", *TRAIN, "run.max_updates=8", f"run.dir={run_dir}",
                         timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.load(open(run_dir / f"rank{r}.json")) for r in range(RANKS)]
    learners, actors = reports[:2], reports[2:]
    assert all(l["updates"] == 8 for l in learners)
    assert learners[0]["parameter_checksum"] == learners[1]["parameter_checksum"]
    sent = sum(a["episodes_sent"] for a in actors)
    received = sum(l["episodes_received"] for l in learners)
    assert sent == received == sum(l["episodes_used"] + sum(l["dropped"].values()) for l in learners)
    # The loss happened: every host's delay line dropped frames.
    status = cluster.script("status").stdout
    drops = [int(n) for n in re.findall(r"dropped_loss=(\d+)", status)]
    assert len(drops) == len(cluster.hosts) and all(n > 0 for n in drops), status
