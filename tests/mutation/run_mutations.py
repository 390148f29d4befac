#!/usr/bin/env python3
"""Plants each deliberate bug of tests/mutation/mutations.py in a copy of the tree, rebuilds,
runs the tests and reports which bugs survived. A mutation is caught when a test goes red.

The work happens in a separate tree (default ../mutation-tree next to the repository), never
in the repository itself: `--sync` copies the repository's working tree there (tracked and
untracked files that git does not ignore, uncommitted changes included). Its build folder
is configured like scripts/test.sh does, and each mutation rebuilds incrementally.

For each mutation: plant it, build, run the fast tier (FAST_TIER, the mutation's own
catchers first) and stop at the first red test; if all stay green, run the mutation's
slower catchers; then restore the original bytes (also on Ctrl-C, SIGTERM or an error; a
run killed outright is repaired from the journal on the next start).

  tests/mutation/run_mutations.py --list
  tests/mutation/run_mutations.py --sync --report docs/mutation_report.md
  tests/mutation/run_mutations.py --only gae-lambda-dropped crc-byte-swapped --report /tmp/m.md

Writes PATH (a markdown table) and PATH with .json; both are rewritten after every mutation.
Exit status: 0 when every mutation run was caught, 1 otherwise, 2 for bad arguments or
stale mutations.
"""

import argparse
import dataclasses
import datetime
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutations import MUTATIONS  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DEFAULT_TREE = Path(os.environ.get("KVRL_MUTATION_TREE", REPO.parent / "mutation-tree"))
# Fast tests, quickest first: every mutation runs these before any slower catcher.
FAST_TIER = ("common_test", "actor_test", "loops_test", "learner_test", "learner_targets", "conformance")
STATE_DIR = ".mutation"  # in the tree: lock, journal of the planted file, logs
BUILD_DIR = "build"
NOT_SYNCED = {STATE_DIR, BUILD_DIR}


@dataclasses.dataclass
class TestRun:
    name: str
    passed: bool
    seconds: float
    timed_out: bool = False  # this runner's per-mutation budget ran out
    hung: bool = False  # CTest stopped it at its TIMEOUT property: red, as a hang should be


@dataclasses.dataclass
class Outcome:
    id: str
    file: str
    bug: str
    catchers: list
    status: str = "not run"  # caught, survived, build_failed, timed_out
    caught_by: str = ""
    catch_seconds: float = 0.0
    build_seconds: float = 0.0
    total_seconds: float = 0.0
    expected_caught: bool = False
    tests: list = dataclasses.field(default_factory=list)
    log: str = ""


# --- The tree ------------------------------------------------------------------------------


def source_files(source):
    """The working tree's files as git sees them: tracked plus untracked-but-not-ignored."""
    command = ["git", "-C", str(source), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]
    out = subprocess.run(command, check=True, capture_output=True).stdout
    names = sorted(set(n for n in out.decode().split("\0") if n))
    return [n for n in names if (source / n).is_file() and not (source / n).is_symlink()]


def tree_files(tree):
    """The tree's files, minus its build folder and the runner's state."""
    for folder, subfolders, files in os.walk(tree):
        if Path(folder) == tree:
            subfolders[:] = [d for d in subfolders if d not in NOT_SYNCED]
        for name in files:
            yield (Path(folder) / name).relative_to(tree).as_posix()


def sync_tree(source, tree, dry_run=False):
    """Makes the tree's files byte-identical to the source's. Changed files get a fresh
    mtime (not the source's), so make always rebuilds what changed. Returns the changed paths."""
    wanted = source_files(source)
    changed = []
    for name in wanted:
        src, dst = source / name, tree / name
        data = src.read_bytes()
        if dst.is_file() and dst.read_bytes() == data:
            continue
        changed.append(name)
        if not dry_run:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(data)
            shutil.copymode(src, dst)
    for name in sorted(set(tree_files(tree)) - set(wanted)):
        changed.append(name)
        if not dry_run:
            (tree / name).unlink()
    return changed


def ensure_configured(tree):
    if (tree / BUILD_DIR / "CMakeCache.txt").exists():
        return
    print(f"configuring {tree / BUILD_DIR}", flush=True)
    log = tree / BUILD_DIR / "configure.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    command = ["cmake", "-S", ".", "-B", BUILD_DIR, "-DKVRL_BUILD_TESTS=ON", "-DKVRL_BUILD_BENCH=OFF"]
    with open(log, "w") as out:
        result = subprocess.run(command, cwd=tree, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        sys.exit(f"cmake configure failed in {tree}: see {log}")


def build(tree, log, timeout_s):
    """Incremental build of everything the tests use, niced so other builds come first.
    Returns (succeeded, seconds)."""
    start = time.monotonic()
    with open(log, "a") as out:
        out.write(f"\n=== build ({datetime.datetime.now():%H:%M:%S})\n")
        out.flush()
        code = run_killable(["nice", "-n", "10", "cmake", "--build", BUILD_DIR, "-j2"], tree, out, timeout_s)
    return code == 0, time.monotonic() - start


def run_killable(command, cwd, out, timeout_s):
    """Runs `command` in its own process group; on timeout kills that group and returns None."""
    process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def ctest_names(tree):
    out = subprocess.run(["ctest", "--test-dir", BUILD_DIR, "-N"], cwd=tree, capture_output=True, text=True).stdout
    return set(re.findall(r"Test\s+#\d+: (\S+)", out))


def run_test(tree, name, log, timeout_s):
    start = time.monotonic()
    with open(log, "a") as out:
        out.write(f"\n=== ctest {name} ({datetime.datetime.now():%H:%M:%S})\n")
        out.flush()
        first_byte = out.tell()
        command = ["ctest", "--test-dir", BUILD_DIR, "-R", f"^{re.escape(name)}$", "--no-tests=error",
                   "--output-on-failure"]
        code = run_killable(command, tree, out, timeout_s)
    with open(log, "rb") as written:
        written.seek(first_byte)
        hung = b"***Timeout" in written.read()
    return TestRun(name, code == 0, round(time.monotonic() - start, 1), timed_out=code is None, hung=hung)


# --- Planting a mutation -------------------------------------------------------------------


def snippet_problem(tree, mutation):
    """Why `mutation` cannot be planted in `tree`, or None."""
    path = tree / mutation.file
    if not path.is_file():
        return f"{mutation.file} does not exist"
    count = path.read_text().count(mutation.find)
    if count == 1:
        return None
    where = "missing from" if count == 0 else f"ambiguous ({count} matches) in"
    return f"its snippet is {where} {mutation.file}"


def journal_paths(tree):
    state = tree / STATE_DIR
    return state / "planted.json", state / "planted.orig"


def restore_interrupted(tree):
    """A run killed while a mutation was planted left a journal: put the original back."""
    marker, original = journal_paths(tree)
    if not marker.exists():
        return
    planted = json.loads(marker.read_text())
    (tree / planted["file"]).write_bytes(original.read_bytes())
    marker.unlink()
    original.unlink()
    print(f"restored {planted['file']} after an interrupted run (mutation {planted['id']})", flush=True)


class Planted:
    """Context manager: the mutation is in the file inside the block, the original bytes after.
    The journal is written before the file changes, so even a SIGKILL leaves a way back."""

    def __init__(self, tree, mutation):
        self.tree, self.mutation = tree, mutation
        self.path = tree / mutation.file

    def __enter__(self):
        self.original = self.path.read_bytes()
        marker, original = journal_paths(self.tree)
        original.write_bytes(self.original)
        marker.write_text(json.dumps({"id": self.mutation.id, "file": self.mutation.file}))
        mutated = self.original.decode().replace(self.mutation.find, self.mutation.replace, 1)
        self.path.write_bytes(mutated.encode())
        return self

    def __exit__(self, *exc):
        self.path.write_bytes(self.original)  # a fresh mtime: the next build recompiles it
        for path in journal_paths(self.tree):
            path.unlink()
        return False


# --- Running ---------------------------------------------------------------------------------


def test_plan(mutation):
    """Fast tier with the mutation's own fast catchers first, then its slower catchers."""
    own_fast = [t for t in mutation.catchers if t in FAST_TIER]
    other_fast = [t for t in FAST_TIER if t not in own_fast]
    slow = [t for t in mutation.catchers if t not in FAST_TIER]
    return own_fast + other_fast, slow


def run_tests_until_red(tree, names, log, deadline):
    """Runs `names` in order and stops at the first red one. Returns (runs, red run or None)."""
    runs = []
    for name in names:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return runs, TestRun(name, False, 0.0, timed_out=True)
        run = run_test(tree, name, log, remaining)
        runs.append(run)
        if not run.passed:
            return runs, run
    return runs, None


def run_planned_tests(tree, mutation, log, deadline):
    """The fast tier, then (only if it stayed green) the mutation's slower catchers."""
    fast, slow = test_plan(mutation)
    runs, red = run_tests_until_red(tree, fast, log, deadline)
    if red is None and slow:
        more, red = run_tests_until_red(tree, slow, log, deadline)
        runs += more
    return runs, red


def run_mutation(tree, mutation, args):
    outcome = Outcome(mutation.id, mutation.file, mutation.bug, list(mutation.catchers))
    log = tree / STATE_DIR / "logs" / f"{mutation.id}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"mutation {mutation.id}: {mutation.bug}\n")
    outcome.log = str(log)
    start = time.monotonic()
    with Planted(tree, mutation):
        built, outcome.build_seconds = build(tree, log, args.build_timeout)
        if not built:
            outcome.status = "build_failed"
        else:
            runs, red = run_planned_tests(tree, mutation, log, deadline=time.monotonic() + args.timeout)
            outcome.tests = [dataclasses.asdict(r) for r in runs]
            record_verdict(outcome, red)
    outcome.total_seconds = round(time.monotonic() - start, 1)
    outcome.build_seconds = round(outcome.build_seconds, 1)
    return outcome


def record_verdict(outcome, red):
    if red is None:
        outcome.status = "survived"
    elif red.timed_out:
        outcome.status = "timed_out"
        outcome.caught_by = red.name
    else:
        outcome.status = "caught"
        outcome.caught_by = red.name + (" (hung: CTest timeout)" if red.hung else "")
        outcome.catch_seconds = red.seconds
        outcome.expected_caught = red.name in outcome.catchers


def run_baseline(tree, mutations, args):
    """Unmutated build and every test the mutations will use must be green, or a red test
    would count as a catch."""
    log = tree / STATE_DIR / "logs" / "baseline.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("baseline: the unmutated tree\n")
    print("baseline: building the unmutated tree", flush=True)
    built, seconds = build(tree, log, args.build_timeout)
    if not built:
        sys.exit(f"baseline build failed in {tree}: see {log}")
    names = list(FAST_TIER) + sorted({t for m in mutations for t in m.catchers if t not in FAST_TIER})
    runs = [run_test(tree, name, log, args.timeout) for name in names]
    for run in runs:
        print(f"  {run.name}: {'passed' if run.passed else 'FAILED'} in {run.seconds} s", flush=True)
    red = [r.name for r in runs if not r.passed]
    if red:
        sys.exit(f"baseline: {', '.join(red)} fail without any mutation (see {log}); "
                 "fix them or use --skip-baseline")
    return {"build_seconds": round(seconds, 1), "tests": [dataclasses.asdict(r) for r in runs]}


def rebuild_unmutated(args):
    """Leaves the tree's binaries matching its sources, so a ctest run there tests the real code."""
    log = args.tree / STATE_DIR / "logs" / "final_rebuild.log"
    log.write_text("rebuild of the restored tree\n")
    built, _ = build(args.tree, log, args.build_timeout)
    if not built:
        print(f"warning: rebuilding the restored tree failed (see {log})", file=sys.stderr)


# --- Reporting -------------------------------------------------------------------------------


def source_description(source):
    def git(*args):
        return subprocess.run(["git", "-C", str(source), *args], capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "--short", "HEAD") or "unknown commit"
    dirty = " with uncommitted changes" if git("status", "--porcelain") else ""
    return f"{source} at {commit}{dirty}"


def summary_line(outcomes):
    counts = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    caught = counts.pop("caught", 0)
    rest = ", ".join(f"{n} {status.replace('_', ' ')}" for status, n in sorted(counts.items()))
    return f"{caught} of {len(outcomes)} mutations caught" + (f" ({rest})" if rest else "")


def markdown_report(meta, outcomes):
    lines = ["# Mutation testing report", "",
             f"Generated {meta['finished']} by `tests/mutation/run_mutations.py` from {meta['source']};",
             f"tree `{meta['tree']}`, {meta['cpus']} CPUs.", ""]
    if meta.get("baseline"):
        base = meta["baseline"]
        tests = ", ".join(f"{t['name']} {t['seconds']} s" for t in base["tests"])
        lines += [f"Baseline (unmutated): build {base['build_seconds']} s; {tests}.", ""]
    lines += [f"**{summary_line(outcomes)}.**", "",
              "| mutation | file | bug it models | result | caught by | test time | build | total |",
              "|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        caught_by = o.caught_by + ("" if o.expected_caught or not o.caught_by else " (unexpected)")
        test_time = f"{o.catch_seconds} s" if o.status == "caught" else ""
        lines.append(f"| `{o.id}` | `{o.file}` | {o.bug} | {o.status.replace('_', ' ')} | {caught_by} | "
                     f"{test_time} | {o.build_seconds} s | {o.total_seconds} s |")
    survivors = [o for o in outcomes if o.status != "caught"]
    if survivors:
        lines += ["", "Not caught (expected catchers, tests that stayed green):", ""]
        for o in survivors:
            green = ", ".join(t["name"] for t in o.tests if t["passed"])
            lines.append(f"- `{o.id}`: expected {', '.join(o.catchers)}; green: {green or 'none run'}")
    return "\n".join(lines) + "\n"


def write_report(path, meta, outcomes):
    meta = dict(meta, finished=datetime.datetime.now().isoformat(timespec="seconds"))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown_report(meta, outcomes))
    path.with_suffix(".json").write_text(json.dumps(
        {"meta": meta, "summary": summary_line(outcomes), "mutations": [dataclasses.asdict(o) for o in outcomes]},
        indent=2) + "\n")


# --- Command line ------------------------------------------------------------------------------


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="list the mutations and whether each still applies")
    parser.add_argument("--only", nargs="+", metavar="ID", help="run only these mutations")
    parser.add_argument("--tree", type=Path, default=DEFAULT_TREE, help=f"the copy to mutate (default {DEFAULT_TREE})")
    parser.add_argument("--source", type=Path, default=REPO, help=f"the working tree to copy (default {REPO})")
    parser.add_argument("--sync", action="store_true", help="refresh the tree from the source's working tree first")
    parser.add_argument("--report", type=Path, help="write the markdown report here (and the JSON beside it)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds of tests per mutation (default 1800)")
    parser.add_argument("--build-timeout", type=float, default=3600, help="seconds per build (default 3600)")
    parser.add_argument("--skip-baseline", action="store_true", help="trust that the unmutated tests pass")
    return parser.parse_args()


def refuse(message):
    print(message, file=sys.stderr)
    sys.exit(2)


def selected_mutations(only):
    ids = [m.id for m in MUTATIONS]
    duplicates = {i for i in ids if ids.count(i) > 1}
    if duplicates:
        refuse(f"tests/mutation/mutations.py: duplicate ids {sorted(duplicates)}")
    unknown = [i for i in only or [] if i not in ids]
    if unknown:
        refuse(f"unknown mutation id(s): {', '.join(unknown)}; --list shows them")
    return [m for m in MUTATIONS if not only or m.id in only]


def refuse_stale(tree, mutations, known_tests):
    problems = [f"{m.id}: {p}" for m in mutations if (p := snippet_problem(tree, m))]
    if known_tests:
        problems += [f"{m.id}: no CTest named {t}" for m in mutations for t in m.catchers if t not in known_tests]
        problems += [f"FAST_TIER: no CTest named {t}" for t in FAST_TIER if t not in known_tests]
    if problems:
        refuse("stale mutations (fix tests/mutation/mutations.py):\n  " + "\n  ".join(problems))


def print_list(mutations, source):
    """Checked against the source: the tree gets its files from there at the next --sync.
    Returns how many are stale (their snippet is gone: a refactor left them planting nothing)."""
    print(f"{len(mutations)} mutations, snippets checked against {source}")
    stale = 0
    for m in mutations:
        problem = snippet_problem(source, m)
        stale += bool(problem)
        print(f"{m.id:40} {'ok' if not problem else 'STALE: ' + problem}\n    {m.file}: {m.bug}\n"
              f"    expected catchers: {', '.join(m.catchers)}")
    if stale:
        print(f"{stale} mutation(s) STALE: update their find/replace in tests/mutation/mutations.py", file=sys.stderr)
    return stale


def lock_tree(tree):
    """One run per tree at a time; the lock goes with the process."""
    (tree / STATE_DIR).mkdir(parents=True, exist_ok=True)
    handle = open(tree / STATE_DIR / "lock", "w")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        sys.exit(f"another run_mutations.py is using {tree}")
    return handle


def prepare_tree(args):
    if args.tree.resolve() == args.source.resolve():
        refuse(f"--tree {args.tree} is the source itself: mutations go into a copy")
    args.tree.mkdir(parents=True, exist_ok=True)
    lock = lock_tree(args.tree)
    restore_interrupted(args.tree)
    if args.sync or not (args.tree / "CMakeLists.txt").exists():
        changed = sync_tree(args.source, args.tree)
        print(f"synced {args.tree} from {args.source}: {len(changed)} file(s) changed", flush=True)
    else:
        drift = sync_tree(args.source, args.tree, dry_run=True)
        if drift:
            print(f"note: {len(drift)} file(s) differ from {args.source} (e.g. {drift[0]}); --sync refreshes them",
                  flush=True)
    ensure_configured(args.tree)
    return lock


def quiet_test_environment():
    """One OpenMP thread per test unless the caller chose otherwise: with other builds on the
    machine, LibTorch's default threads made learner_test 10x slower (32 s against 3.3 s).
    Tests that set OMP_NUM_THREADS in CTest keep their own."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def raise_on_termination(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def run(args, mutations):
    _lock = prepare_tree(args)
    refuse_stale(args.tree, mutations, ctest_names(args.tree))
    meta = {"source": source_description(args.source), "tree": str(args.tree), "cpus": os.cpu_count(),
            "started": datetime.datetime.now().isoformat(timespec="seconds"), "fast_tier": list(FAST_TIER)}
    if not args.skip_baseline:
        meta["baseline"] = run_baseline(args.tree, mutations, args)
    outcomes = []
    for number, mutation in enumerate(mutations, 1):
        print(f"[{number}/{len(mutations)}] {mutation.id}: {mutation.bug}", flush=True)
        outcome = run_mutation(args.tree, mutation, args)
        outcomes.append(outcome)
        print(f"    {outcome.status}{' by ' + outcome.caught_by if outcome.caught_by else ''} "
              f"(build {outcome.build_seconds} s, total {outcome.total_seconds} s)", flush=True)
        write_report(args.report, meta, outcomes)
    rebuild_unmutated(args)
    print(summary_line(outcomes) + f"; report: {args.report}")
    return 0 if all(o.status == "caught" for o in outcomes) else 1


def main():
    args = parse_args()
    mutations = selected_mutations(args.only)
    if args.list:
        return 1 if print_list(mutations, args.source) else 0
    if not args.report:
        refuse("--report PATH is required to run mutations")
    args.report = args.report.resolve()
    signal.signal(signal.SIGTERM, raise_on_termination)
    signal.signal(signal.SIGHUP, raise_on_termination)
    quiet_test_environment()
    try:
        return run(args, mutations)
    except KeyboardInterrupt:
        print(f"interrupted: the planted file is restored, the report holds the mutations finished so far, "
              f"and the build in {args.tree} may hold the last mutation until its next build", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
