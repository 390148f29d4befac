"""kvrl train across hosts of the fake cluster (scripts/cluster.sh, docs/multinode.md), launched
the documented way: launch/kvrl-mpirun with a hostfile (`scripts/cluster.sh run`).

- 3 hosts, 6 ranks mapped by node: learners 0 and 1 on two hosts, so their gradient
  all-reduce crosses the network, and actors on every host. CartPole reaches the learning
  test's target (a mean return >= 450, tests/integration/test_learning_mpi.py; here within
  400k env steps), the learners end bit-identical, every episode and weight version is
  accounted for on every rank, and each rank's own report (rank<N>.json: host, local_rank,
  device) shows where it ran. One run serves these four tests.
- Run directories when hosts share no file system: on a node-local path each host keeps
  its own ranks' files and learner 0's host the rest, and a --resume from it is refused
  naming the rank; in the shared directory a --resume finishes.
The checks are functions, so that test_the_checks_catch_... can show them failing on
doctored reports without a cluster.
"""
import json
import os
import re
import shutil
import sys
from collections import Counter, defaultdict

import pytest

from conftest import FakeCluster, skip_unless_cluster_possible

# tests/integration/test_learning_mpi.py's target: PPO on CartPole, a mean return >= 450 of
# the last 100 episodes. It allows 500k env steps; here 6 ranks got there by 280k-350k
# (474-491 at 400k, 497 at 500k), so 400k keeps the run short with a margin.
TARGET_RETURN = 450
BUDGET = 400000
# Short runs: a few updates of 512 env steps.
SHORT = ["learner.steps_per_update=512", "actor.credit_steps=512", "run.total_env_steps=1000000"]
LEARNER_ZERO_FILES = {"config.yaml", "checkpoints", "metrics.csv", "metrics.jsonl", "tensorboard"}


def load_reports(run_dir, ranks):
    return [json.load(open(os.path.join(run_dir, f"rank{r}.json"))) for r in range(ranks)]


def gpus_seen(log_text):
    """The number of usable CUDA devices a rank logged at its start."""
    found = re.search(r"(\d+) CUDA device\(s\) usable", log_text)
    return int(found.group(1)) if found else 0


def placement_problems(reports, hosts, gpus):
    """What is wrong with where the ranks say they ran: learners on two hosts at least, an
    actor on every host, local ranks 0..k-1 on each host, and the device kvrl's placement
    rule gives that local rank (`gpus[rank]`: the GPUs the rank saw)."""
    problems = []
    on_host = defaultdict(list)
    for report in reports:
        if report.get("host") not in hosts:
            problems.append(f"rank {report['rank']} ran on {report.get('host')!r}, not a host of {hosts}")
        on_host[report.get("host")].append(report)
    learner_hosts = [r["host"] for r in reports if r["role"] == "learner"]
    if len(set(learner_hosts)) < min(len(learner_hosts), len(hosts)):
        problems.append(f"learners share hosts: {learner_hosts}")
    for host in hosts:
        if not any(r["role"] == "actor" for r in on_host.get(host, [])):
            problems.append(f"no actor on {host}")
    for host, there in on_host.items():
        local = sorted(r.get("local_rank") for r in there)
        if local != list(range(len(there))):
            problems.append(f"{host} runs ranks {[r['rank'] for r in there]} with local ranks {local}")
    for report in reports:
        count = gpus[report["rank"]]
        want = f"cuda:{report['local_rank'] % count}" if count else "cpu"
        if report.get("device") != want:
            problems.append(f"rank {report['rank']} (local rank {report.get('local_rank')}, {count} GPUs) "
                            f"computed on {report.get('device')!r}, expected {want!r}")
    return problems


def agreement_problems(reports):
    """The learners must end with bit-identical parameters after the same updates, each having
    trained on episodes of its own."""
    learners = [r for r in reports if r["role"] == "learner"]
    problems = []
    if len({r["parameter_checksum"] for r in learners}) != 1:
        problems.append("learners differ: " + ", ".join(f"rank {r['rank']} {r['parameter_checksum']}" for r in learners))
    if len({r["updates"] for r in learners}) != 1:
        problems.append(f"update counts differ: {[r['updates'] for r in learners]}")
    problems += [f"learner {r['rank']} used no episode" for r in learners if r["episodes_used"] == 0]
    return problems


def accounting_problems(reports):
    """Every episode an actor sent reached a learner, which used or dropped it, and each
    learner heard from each actor exactly what that actor says it sent to it."""
    learners = [r for r in reports if r["role"] == "learner"]
    actors = [r for r in reports if r["role"] == "actor"]
    problems = [f"rank {r['rank']} exited {r['exit_code']}" for r in reports if r["exit_code"] != 0]
    sent, received = sum(a["episodes_sent"] for a in actors), sum(l["episodes_received"] for l in learners)
    if sent != received:
        problems.append(f"actors sent {sent} episodes, learners received {received}")
    for actor in actors:
        if sum(actor["episodes_sent_to"]) != actor["episodes_sent"]:
            problems.append(f"actor {actor['rank']}: sent {actor['episodes_sent']} but {actor['episodes_sent_to']} per learner")
    for index, learner in enumerate(learners):
        if learner["episodes_received"] != learner["episodes_used"] + sum(learner["dropped"].values()):
            problems.append(f"learner {learner['rank']}: received {learner['episodes_received']} != used "
                            f"{learner['episodes_used']} + dropped {learner['dropped']}")
        expected = {str(a["rank"]): a["episodes_sent_to"][index] for a in actors}
        for field in ("announced_by", "received_from"):
            if learner[field] != expected:
                problems.append(f"learner {learner['rank']} {field} {learner[field]}, actors sent it {expected}")
    return problems


def weight_sync_problems(reports):
    """Every weight version an actor applied holds learner 0's weights of that version."""
    synced = reports[0]["weights_synced"]["versions"]
    problems = []
    for actor in (r for r in reports if r["role"] == "actor"):
        applied = actor["weights_applied"]["versions"]
        if len(applied) < 2:
            problems.append(f"actor {actor['rank']} applied {len(applied)} weight versions")
        problems += [f"actor {actor['rank']} version {v}: {c}, learner 0 sent {synced.get(v)}"
                     for v, c in applied.items() if synced.get(v) != c]
    return problems


# --- One learning run on 3 hosts, four tests ---------------------------------------------

@pytest.fixture(scope="module")
def cartpole_run(request):
    """3 hosts x 2 slots, -np 6 --map-by node: ranks 0-5 land on h0 h1 h2 h0 h1 h2, so
    learners 0 and 1 are on two hosts and every host runs an actor (checked from the
    reports, not assumed). The cluster's state stays in /tmp when a test here failed."""
    skip_unless_cluster_possible()
    failures_before = request.session.testsfailed
    cluster = FakeCluster(hosts=3, slots=2)
    with cluster:
        run_dir = cluster.shared / "cartpole"
        result = cluster.train(6, "learners=2", "run.seed=1", f"run.total_env_steps={BUDGET}", f"run.dir={run_dir}",
                               mpirun_args=["--map-by", "node"], timeout=900)
        print(f"\n{cluster.name}: exit {result.returncode}: {result.stdout.strip().splitlines()[-1:]}", file=sys.stderr)
        assert result.returncode == 0, result.stderr[-4000:]
        reports = load_reports(run_dir, 6)
        gpus = {r: gpus_seen(open(run_dir / f"rank{r}.log").read()) for r in range(6)}
        yield cluster, result, reports, gpus
    if request.session.testsfailed == failures_before:
        shutil.rmtree(cluster.state, ignore_errors=True)
    else:
        print(f"{cluster.name}: kept {cluster.state}", file=sys.stderr)


def test_ranks_report_their_hosts_local_ranks_and_devices(cartpole_run):
    cluster, _, reports, gpus = cartpole_run
    layout = {r["rank"]: (r["role"], r["host"], r["local_rank"], r["device"]) for r in reports}
    assert placement_problems(reports, cluster.hosts, gpus) == [], layout
    # The gradient all-reduce ran between two hosts: over TCP, the only way across.
    assert reports[0]["host"] != reports[1]["host"], layout
    assert Counter(r["host"] for r in reports) == {host: 2 for host in cluster.hosts}, layout


def test_learners_on_two_hosts_end_bit_identical(cartpole_run):
    _, _, reports, _ = cartpole_run
    assert agreement_problems(reports) == [], [(r["rank"], r["host"], r["parameter_checksum"]) for r in reports[:2]]
    assert reports[0]["updates"] > 50, reports[0]["updates"]


def test_cartpole_reaches_the_learning_target_across_hosts(cartpole_run):
    _, result, reports, _ = cartpole_run
    learner = reports[0]
    assert learner["env_steps"] <= BUDGET + 4096 * 2, learner["env_steps"]
    assert learner["mean_return"] >= TARGET_RETURN, (learner["mean_return"], result.stdout[-1500:])
    assert result.stdout.strip().splitlines()[-1].startswith("kvrl train: finished: env_steps=")


def test_every_rank_accounts_for_every_episode_and_weight_version(cartpole_run):
    _, _, reports, _ = cartpole_run
    assert accounting_problems(reports) == []
    assert weight_sync_problems(reports) == []
    assert all(a["episodes_sent"] > 0 and min(a["episodes_sent_to"]) > 0 for a in reports[2:]), reports[2:]


def test_the_checks_catch_ranks_on_one_host_differing_learners_and_lost_episodes():
    hosts = ["c-h0", "c-h1", "c-h2"]
    learner = dict(role="learner", device="cpu", exit_code=0, updates=5, parameter_checksum="aa",
                   episodes_used=14, episodes_received=15, dropped={"stale": 1},
                   announced_by={"2": 5, "3": 5, "4": 5}, received_from={"2": 5, "3": 5, "4": 5})
    actor = dict(role="actor", device="cpu", exit_code=0, episodes_sent=10, episodes_sent_to=[5, 5])
    good = [dict(learner, rank=0, host="c-h0", local_rank=0), dict(learner, rank=1, host="c-h1", local_rank=0),
            dict(actor, rank=2, host="c-h2", local_rank=0), dict(actor, rank=3, host="c-h1", local_rank=1),
            dict(actor, rank=4, host="c-h0", local_rank=1)]
    no_gpus = {rank: 0 for rank in range(5)}
    assert placement_problems(good, hosts, no_gpus) == []
    assert agreement_problems(good) == [] and accounting_problems(good) == []

    one_host = [dict(r, host="c-h0", local_rank=r["rank"]) for r in good]
    assert any("learners share hosts" in p for p in placement_problems(one_host, hosts, no_gpus))
    assert any("no actor on c-h1" in p for p in placement_problems(one_host, hosts, no_gpus))
    same_local = [dict(r, local_rank=0) for r in good]
    assert any("local ranks [0, 0]" in p for p in placement_problems(same_local, hosts, no_gpus))
    assert any("expected 'cuda:1'" in p for p in placement_problems(good, hosts, {**no_gpus, 4: 2}))

    differing = [dict(good[0], parameter_checksum="ab")] + good[1:]
    assert agreement_problems(differing) == ["learners differ: rank 0 ab, rank 1 aa"]
    lost = good[:4] + [dict(good[4], episodes_sent=11, episodes_sent_to=[6, 5])]
    assert len(accounting_problems(lost)) == 3  # the total, and learner 0's announced_by and received_from


# --- Run directories without a shared file system ----------------------------------------

def test_a_node_local_run_dir_splits_over_the_hosts_and_a_resume_from_it_is_refused(cluster):
    # -np 4 --map-by node: 4 ranks on 3 hosts, learners 0 and 1 on two of them.
    run_dir = f"/tmp/{cluster.name}-local"
    result = cluster.train(4, "learners=2", "run.max_updates=3", *SHORT, f"run.dir={run_dir}",
                           mpirun_args=["--map-by", "node"], timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    found = {host: cluster.listdir(host, run_dir) for host in cluster.hosts}
    # Each rank's report, read on the host that holds it, names that host.
    where = {}
    for host, names in found.items():
        for name in sorted(names or ()):
            if re.fullmatch(r"rank\d+\.json", name):
                report = json.loads(cluster.exec(host, "cat", f"{run_dir}/{name}").stdout)
                assert report["host"] == host, (name, report["host"], host)
                where[report["rank"]] = host
    assert sorted(where) == [0, 1, 2, 3], found
    assert len({where[0], where[1]}) == 2 and set(where.values()) == set(cluster.hosts), where
    for host in cluster.hosts:
        mine = {f"rank{r}.{ext}" for r, h in where.items() if h == host for ext in ("log", "json")}
        expected = mine | (LEARNER_ZERO_FILES if host == where[0] else set())
        assert found[host] == expected, (host, found[host], expected)
    # Nothing landed in the /tmp of the machine or of the head namespace, where mpirun runs.
    assert not os.path.exists(run_dir)
    assert not os.path.exists(cluster.state / "hosts" / f"{cluster.name}-head" / "tmp" / os.path.basename(run_dir))

    # Every rank reads config.yaml on a --resume, but only learner 0's host has it: the
    # lowest rank elsewhere refuses, every rank exits 2 within the timeout instead of hanging.
    refuser = min(rank for rank, host in where.items() if host != where[0])
    result = cluster.train(4, "--resume", run_dir, "run.max_updates=5", config=None,
                           mpirun_args=["--map-by", "node"], timeout=120)
    assert result.returncode == 2, (result.returncode, result.stderr[-4000:])
    assert (f"kvrl train: error on rank {refuser}, whose inputs differ from rank 0's" in result.stderr
            and f"cannot read config file '{run_dir}/config.yaml'" in result.stderr), result.stderr[-4000:]


def test_a_run_dir_on_the_shared_file_system_resumes_on_every_host(cluster):
    run_dir = cluster.shared / "resumed"
    result = cluster.train(4, "learners=2", "run.max_updates=3", *SHORT, f"run.dir={run_dir}",
                           mpirun_args=["--map-by", "node"], timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    first = load_reports(run_dir, 4)
    assert first[0]["host"] != first[1]["host"], [r["host"] for r in first]

    result = cluster.train(4, "--resume", str(run_dir), "run.max_updates=5", config=None,
                           mpirun_args=["--map-by", "node"], timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    reports = load_reports(run_dir, 4)
    checkpoint = run_dir / "checkpoints" / "checkpoint-0000000003.pt"
    for learner in reports[:2]:
        assert learner["resumed_from_update"] == 3 and learner["updates"] == 5, learner
        # Each learner read the checkpoint from the shared path on its own host.
        log = open(run_dir / f"rank{learner['rank']}.log").read()
        assert f"resumed from {checkpoint}: update 3" in log, (learner["rank"], learner["host"])
    assert agreement_problems(reports) == []
    assert accounting_problems(reports) == []
    assert {r["host"] for r in reports} == set(cluster.hosts)
