"""A fake cluster per test, for the multinode tests (scripts/cluster.sh, docs/multinode.md).

Fixture `cluster`: brings up a fresh cluster of network-namespace hosts before the test and
always brings it down after it, also when the test failed or timed out. Its shape comes from
a marker on the test (default: 3 hosts, 2 slots each):

    @pytest.mark.cluster(hosts=3, slots=2)
    def test_something(cluster):
        result = cluster.train(6, "learners=2", f"run.dir={cluster.shared}/run", mpirun_args=["--map-by", "node"])
        assert result.returncode == 0, result.stderr[-3000:]
        cluster.script("shape", "h1", "5ms", "0", "0")   # any scripts/cluster.sh command
        cluster.exec("h1", "ls", "/tmp")                   # a command on one host

Each cluster gets a name of its own (KVRL_CLUSTER_PREFIX, e.g. `mn4f2a1`: scripts/cluster.sh
allows 12 characters, as the bridge `<prefix>-br` must fit Linux's 15) and a state
directory /tmp/<prefix>-cluster (KVRL_CLUSTER_STATE), so that tests, test files and other
users' clusters can run side by side. Every host sees `cluster.shared` at the same path, as
a shared file system; each host has a private /tmp. The state directory is removed after a
passing test and kept after a failing one (its log/ holds the rsh agent's log), which the
teardown prints.

`FakeCluster(hosts, slots)` is the same thing as a context manager, for a fixture of wider
scope (one cluster for a whole module: `with FakeCluster(3, 2) as c: yield c`).

The tests skip, saying why, where a fake cluster cannot exist: not root, no `ip netns`,
no `unshare`, no mpirun, or KVRL_BIN unset. Every command runs under `timeout -k 5`;
`down` still follows, since mpirun outlives a killed kvrl-mpirun in a session of its own.
"""
import itertools
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO / "scripts" / "cluster.sh"
KVRL = os.environ.get("KVRL_BIN")
CARTPOLE_PPO = REPO / "configs" / "cartpole_ppo.yaml"

# Open MPI's rsh launcher races with the agent's exec now and then and says so; harmless
# (/work/shared/simcluster/README.md), dropped before a test looks at stderr.
MPI_NOISE = re.compile(r"plm:rsh.*setpgid|setpgid.*failed in parent")

_names = itertools.count()


def why_no_cluster():
    """The reason a fake cluster cannot be built here, or None when it can."""
    if os.geteuid() != 0:
        return "not root: scripts/cluster.sh needs root for network namespaces"
    for tool in ("ip", "unshare", "mpirun", "timeout", "flock"):
        if shutil.which(tool) is None:
            return f"'{tool}' not found: scripts/cluster.sh needs iproute2, util-linux and Open MPI"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"'ip netns' does not work here: {probe.stderr.strip()}"
    probe = subprocess.run(["unshare", "--uts", "--", "true"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"'unshare --uts' does not work here: {probe.stderr.strip()}"
    if not KVRL or not os.access(KVRL, os.X_OK):
        return f"KVRL_BIN ({KVRL!r}) is not the built kvrl: set it to build/launch/kvrl"
    return None


def skip_unless_cluster_possible():
    reason = why_no_cluster()
    if reason:
        # Under CTest a skipped pytest passes: say it where the log shows it.
        print(f"\nSKIPPED multinode test: {reason}", file=sys.stderr)
        pytest.skip(f"no fake cluster: {reason}")


def clean_stderr(text):
    return "\n".join(line for line in text.splitlines() if not MPI_NOISE.search(line))


class FakeCluster:
    """N fake hosts of scripts/cluster.sh, up from __enter__ (or up()) to __exit__ (or down())."""

    def __init__(self, hosts=3, slots=2, name=None):
        self.host_count, self.slots = hosts, slots
        self.name = name or f"mn{os.getpid() % 100000:x}{next(_names):x}"
        assert re.fullmatch(r"[a-z][a-z0-9]{0,11}", self.name), self.name
        self.state = Path(f"/tmp/{self.name}-cluster")
        self.shared = self.state / "shared"  # the same path on every host
        self.hosts = [f"{self.name}-h{i}" for i in range(hosts)]
        self.env = dict(os.environ, KVRL_CLUSTER_PREFIX=self.name, KVRL_CLUSTER_STATE=str(self.state),
                        OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
        self.is_up = False

    def script(self, *args, timeout=120, check=True):
        """scripts/cluster.sh ARGS under `timeout -k 5`; raises on failure when `check`."""
        result = subprocess.run(["timeout", "-k", "5", str(timeout), str(CLUSTER_SH), *map(str, args)],
                                capture_output=True, text=True, env=self.env)
        result.stderr = clean_stderr(result.stderr)
        if check and result.returncode != 0:
            raise AssertionError(f"scripts/cluster.sh {' '.join(map(str, args))}: exit {result.returncode}\n"
                                 f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}")
        return result

    def up(self):
        self.script("up", self.host_count, self.slots)
        self.is_up = True
        return self

    def down(self):
        """Safe at any time; returns the `down` output (what it killed and removed)."""
        result = self.script("down", timeout=120, check=False)
        self.is_up = False
        return result.stdout + result.stderr

    def run(self, *mpirun_args, timeout=300):
        """launch/kvrl-mpirun --hostfile <the cluster's> MPIRUN_ARGS in the head namespace.
        Returns the CompletedProcess (stderr without Open MPI's setpgid noise); exit 124 or
        137 when `timeout` ran out."""
        return self.script("run", "-x", "OMP_NUM_THREADS", *mpirun_args, timeout=timeout, check=False)

    def train(self, np, *args, mpirun_args=(), config=CARTPOLE_PPO, timeout=300):
        """`kvrl train CONFIG ARGS` on `np` ranks; pass config=None for `--resume DIR ...`."""
        command = [KVRL, "train", *([str(config)] if config else []), *args]
        return self.run("-np", np, *mpirun_args, *command, timeout=timeout)

    def exec(self, host, *command, timeout=60):
        """COMMAND on HOST (PREFIX-hI, hI or I) as that host sees the world."""
        return self.script("exec", host, *command, timeout=timeout, check=False)

    def listdir(self, host, path):
        """The names in PATH as HOST sees it, or None when it does not exist there."""
        result = self.exec(host, "ls", "-A", path)
        return set(result.stdout.split()) if result.returncode == 0 else None

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        print(f"\n{self.name}: {self.down().strip()}", file=sys.stderr)
        return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"report_{report.when}", report)


@pytest.fixture
def cluster(request):
    skip_unless_cluster_possible()
    marker = request.node.get_closest_marker("cluster")
    shape = dict(hosts=3, slots=2, **(marker.kwargs if marker else {}))
    fake = FakeCluster(**shape)
    try:
        fake.up()
        yield fake
    finally:
        print(f"\n{fake.name}: {fake.down().strip()}", file=sys.stderr)
        report = getattr(request.node, "report_call", None)
        if report is not None and report.passed:
            shutil.rmtree(fake.state, ignore_errors=True)
        else:
            print(f"{fake.name}: kept {fake.state} (logs in log/, run directories in shared/)", file=sys.stderr)


def pytest_configure(config):
    config.addinivalue_line("markers", "cluster(hosts=3, slots=2): the shape of the `cluster` fixture's fake cluster")
