"""Faults under mpiexec: a stop signal and resuming from the checkpoints, ranks that die,
NaN losses, and bad input. Every run is bounded in time; docs/reliability.md lists what
each test shows."""
import csv
import json
import os
import signal
import subprocess
import time

import pytest
import torch

KVRL = os.environ.get("KVRL_BIN")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
WRAPPER = os.path.join(ROOT, "launch", "kvrl-mpirun")
PPO = os.path.join(ROOT, "configs", "cartpole_ppo.yaml")
SMALL = ["learner.steps_per_update=512", "actor.credit_steps=512", "run.total_env_steps=10000000"]


def train(ranks, *args, env=None, timeout=180):
    """`kvrl train` through the launch wrapper; returns (result, seconds)."""
    start = time.monotonic()
    result = subprocess.run([WRAPPER, "-np", str(ranks), KVRL, "train", *args], capture_output=True, text=True,
                            timeout=timeout, env=dict(os.environ, **(env or {})))
    return result, time.monotonic() - start


def stats(run_dir, rank):
    return json.load(open(os.path.join(run_dir, f"rank{rank}.json")))


def metrics(run_dir):
    with open(os.path.join(run_dir, "metrics.csv")) as f:
        return list(csv.DictReader(f))


def checkpoints(run_dir):
    folder = os.path.join(run_dir, "checkpoints")
    return sorted(os.listdir(folder)) if os.path.isdir(folder) else []


def test_sigterm_stops_every_rank_with_a_checkpoint_and_resume_continues(tmp_path):
    run_dir = str(tmp_path / "run")
    # PPO, whose clipped updates keep a learned policy through the 12 resumed updates below at
    # the near-constant rate of a 10M budget. V-trace at its constant 2e-3 once collapsed there
    # (a mean of 24.9 after resume from a policy at 128.8, fresh-clone CI of ed5c106), which
    # says nothing about resuming. PPO reaches 80 at update 8-9, hence checkpoints every 3.
    process = subprocess.Popen([WRAPPER, "-np", "3", KVRL, "train", PPO, f"run.dir={run_dir}",
                                "run.total_env_steps=10000000", "checkpoint.interval_updates=3"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 150
    # Train until the policy has learned something (a fresh one scores ~22), then ask it to stop.
    while time.monotonic() < deadline:
        time.sleep(1)
        rows = metrics(run_dir) if os.path.exists(os.path.join(run_dir, "metrics.csv")) else []
        if rows and (float(rows[-1]["mean_return"]) >= 80 or int(rows[-1]["env_steps"]) >= 400000):
            break
    assert process.poll() is None, process.communicate()[1][-3000:]
    signalled = time.monotonic()
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    stop_seconds = time.monotonic() - signalled
    assert process.returncode == 75, err[-3000:]
    assert stop_seconds < 15, f"took {stop_seconds:.1f}s to stop"
    assert "kvrl train: interrupted (" in out, out[-2000:]
    assert f"--resume {run_dir}" in out
    learner = stats(run_dir, 0)
    actors = [stats(run_dir, r) for r in (1, 2)]
    stopped_at = learner["updates"]
    assert learner["exit_code"] == 75 and all(a["exit_code"] == 75 for a in actors)
    # Every episode an actor sent is used or dropped with a reason; the ones still running are counted.
    assert sum(a["episodes_sent"] for a in actors) == learner["episodes_received"]
    assert learner["episodes_received"] == learner["episodes_used"] + sum(learner["dropped"].values())
    assert all(a["partial_episodes_at_stop"] > 0 for a in actors)
    # The final checkpoint holds the update the run stopped at; older ones are kept, up to 3.
    names = checkpoints(run_dir)
    assert names[-1] == f"checkpoint-{stopped_at:010d}.pt" and 2 <= len(names) <= 3, names
    saved = torch.load(os.path.join(run_dir, "checkpoints", names[-1]), weights_only=True)
    assert saved["format"] == "kvrl-checkpoint" and saved["progress"]["updates"] == stopped_at
    assert saved["progress"]["env_steps"] == learner["env_steps"]
    before = metrics(run_dir)

    # Resumed at its budget: no update, so the parameters are exactly those saved.
    result, _ = train(3, "--resume", run_dir, f"run.max_updates={stopped_at}")
    assert result.returncode == 0, result.stderr[-3000:]
    same = stats(run_dir, 0)
    assert same["updates"] == stopped_at and same["resumed_from_update"] == stopped_at
    assert same["parameter_checksum"] == learner["parameter_checksum"]

    # Resumed for 12 more updates: the counters and the curve go on from there. Only episodes
    # that finish after the resume count in its mean return, and in a short run those are
    # mostly the short ones (6 updates once gave 38 from a policy at 98), hence 12.
    result, _ = train(3, "--resume", run_dir, f"run.max_updates={stopped_at + 12}")
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = stats(run_dir, 0)
    assert resumed["updates"] == stopped_at + 12
    assert resumed["env_steps"] > learner["env_steps"]
    assert "resumed from " + os.path.join(run_dir, "checkpoints", names[-1]) in open(
        os.path.join(run_dir, "rank0.log")).read()
    after = metrics(run_dir)[len(before):]
    assert [int(r["updates"]) for r in after] == list(range(stopped_at + 1, stopped_at + 13))
    assert int(after[0]["env_steps"]) > int(before[-1]["env_steps"])
    # The resumed policy plays far above a fresh one (~22): it learned on from where it stopped.
    learned = float(before[-1]["mean_return"])
    assert learned > 60, before[-1]
    assert resumed["mean_return"] > 40, (resumed["mean_return"], learned)


def test_resume_falls_back_past_a_corrupt_checkpoint_and_says_so(tmp_path):
    run_dir = str(tmp_path)
    result, _ = train(2, PPO, f"run.dir={run_dir}", *SMALL, "run.max_updates=4", "checkpoint.interval_updates=2")
    assert result.returncode == 0, result.stderr[-3000:]
    names = checkpoints(run_dir)
    assert names == ["checkpoint-0000000002.pt", "checkpoint-0000000004.pt"]
    newest = os.path.join(run_dir, "checkpoints", names[-1])
    with open(newest, "r+b") as f:  # flip a byte in the middle of the tensors
        f.seek(os.path.getsize(newest) // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0xFF]))
    result, _ = train(2, "--resume", run_dir, "run.max_updates=5")
    assert result.returncode == 0, result.stderr[-3000:]
    assert stats(run_dir, 0)["resumed_from_update"] == 2
    log = open(os.path.join(run_dir, "rank0.log")).read()
    assert f"skipping checkpoint '{newest}'" in log
    assert "resuming from an older checkpoint" in log


def test_resume_rejects_another_model_naming_the_key(tmp_path):
    run_dir = str(tmp_path)
    result, _ = train(2, PPO, f"run.dir={run_dir}", *SMALL, "run.max_updates=1")
    assert result.returncode == 0, result.stderr[-3000:]
    result, seconds = train(2, PPO, "--resume", run_dir, *SMALL, "model.hidden_size=32", timeout=60)
    assert result.returncode != 0
    assert "model.hidden_size: '64' in the checkpoint, '32' now" in result.stderr, result.stderr[-3000:]
    assert seconds < 30


@pytest.mark.parametrize("fault,rank,role,evidence", [
    ("exit:2:40", 2, "actor", "fault injection: exiting with status 1 at step 40"),
    ("abort:0:3", 0, "learner", "kvrl: rank 0 (learner) crashed: SIGABRT"),
    ("kill:1:40", 1, "actor", "exited on signal 9"),
])
def test_a_dying_rank_ends_the_job_within_seconds_naming_it(tmp_path, fault, rank, role, evidence):
    result, seconds = train(3, PPO, f"run.dir={tmp_path}", *SMALL, env={"KVRL_FAULT": fault}, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert evidence in output, output[-3000:]
    assert f"rank {rank}" in output
    # The launch wrapper names the role too, even for a rank killed outright.
    assert f"kvrl-mpirun: rank {rank} ({role}) failed" in output, output[-3000:]
    assert "ranks: learners 0-0, actors 1-2" in open(tmp_path / "rank0.log").read()
    assert seconds < 60, f"the job took {seconds:.0f}s to end"


@pytest.mark.parametrize("fault,learners,lost", [
    ("freeze:2:150", 1, "rank 2 (actor on "),
    ("freeze:1:6", 2, "rank 1 (learner on "),
])
def test_a_rank_gone_silent_ends_the_job_naming_it_and_resume_finishes(tmp_path, fault, learners, lost):
    """A frozen rank (SIGSTOP: alive to Open MPI, silent to its peers, as a hung host or a
    partition MPI does not see) leaves the others waiting in a receive or a collective
    for ever; kvrl's heartbeats end the job, naming it, and the last checkpoint resumes."""
    run_dir = str(tmp_path)
    result, seconds = train(3, PPO, f"run.dir={run_dir}", *SMALL, f"learners={learners}", "run.peer_timeout_s=4",
                            "checkpoint.interval_updates=2", env={"KVRL_FAULT": fault}, timeout=120)
    output = result.stdout + result.stderr
    assert result.returncode == 4, output[-3000:]
    assert f"lost contact with {lost}" in output, output[-3000:]
    assert "no heartbeat for " in output and "(run.peer_timeout_s = 4.0)" in output, output[-3000:]
    assert f"resume with: kvrl train --resume {run_dir}" in output
    assert seconds < 40, f"the job took {seconds:.0f}s to end"
    saved = checkpoints(run_dir)
    assert saved, "no checkpoint was written before the fault"
    last_update = int(saved[-1].split("-")[1].split(".")[0])  # checkpoint-0000000004.pt
    # A tight timeout on the healthy resumed run: no rank may be taken for lost while the job
    # starts, trains or ends (the barrier before the heartbeats stop).
    resumed, _ = train(3, "--resume", run_dir, f"run.max_updates={last_update + 2}", "run.peer_timeout_s=2",
                       timeout=120)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert "kvrl train: finished:" in resumed.stdout


def test_nan_losses_skip_updates_on_every_learner_alike(tmp_path):
    result, _ = train(3, PPO, f"run.dir={tmp_path}", *SMALL, "learners=2", "run.max_updates=6",
                      env={"KVRL_FAULT": "nan_loss:1:3:2"})
    assert result.returncode == 0, result.stderr[-3000:]
    first, second = stats(tmp_path, 0), stats(tmp_path, 1)
    assert first["skipped_updates"] == second["skipped_updates"] == 2
    assert first["parameter_checksum"] == second["parameter_checksum"]
    log = open(tmp_path / "rank0.log").read()
    assert "update 3 skipped: a loss or gradient was NaN or Inf (1 in a row" in log
    assert "update 4 skipped" in log and "update 5 skipped" not in log


def test_too_many_nan_updates_in_a_row_stop_the_run_naming_the_checkpoint(tmp_path):
    result, _ = train(2, PPO, f"run.dir={tmp_path}", *SMALL, "learner.max_consecutive_skips=3",
                      env={"KVRL_FAULT": "nan_loss:0:3:100"})
    assert result.returncode == 3, result.stderr[-3000:]
    assert ("3 consecutive updates (3 to 5) had a NaN or Inf loss or gradient; the parameters are still finite, "
            "those of update 2") in result.stderr
    assert f"resume from {tmp_path}/checkpoints/checkpoint-0000000005.pt" in result.stderr
    saved = torch.load(tmp_path / "checkpoints" / "checkpoint-0000000005.pt", weights_only=True)
    assert all(torch.isfinite(t).all() for t in saved["model"].values())
    assert stats(tmp_path, 1)["exit_code"] == 3


@pytest.mark.parametrize("args,message", [
    (["learner.epochs=two"], "config key 'learner.epochs' = 'two': expected an integer in [1, 1000]"),
    (["model.hidden_size=66"], "model.num_heads (4) must divide model.hidden_size (66)"),
    (["learners=3"], "learners (3) needs at least one more rank to act, but 3 rank(s) were started"),
    (["checkpoint.keep=0"], "config key 'checkpoint.keep' = '0': expected an integer in [1, 1000000]"),
    (["--resume"], "--resume: 1 required RUN_DIR missing"),
    (["--resum", "x"], "unknown argument '--resum' (kvrl train takes --resume, [CONFIG.yaml] [key=value ...]"),
])
def test_bad_input_is_refused_before_work_naming_it(tmp_path, args, message):
    result, _ = train(3, PPO, f"run.dir={tmp_path}", *args, timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    assert message in result.stderr, result.stderr[-3000:]
    assert not (tmp_path / "rank0.log").exists()


def test_resume_without_checkpoints_and_a_bad_fault_spec_are_refused(tmp_path):
    (tmp_path / "config.yaml").write_text(open(PPO).read())
    result, _ = train(3, "--resume", str(tmp_path), timeout=60)
    assert result.returncode == 2
    assert f"--resume {tmp_path}: no checkpoint in {tmp_path}/checkpoints" in result.stderr
    result, _ = train(3, PPO, f"run.dir={tmp_path}", env={"KVRL_FAULT": "explode:1:2"}, timeout=60)
    assert result.returncode == 2
    assert "KVRL_FAULT entry 'explode:1:2': unknown kind 'explode'" in result.stderr


class _RunsCodeWhenUnpickled:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_checkpoint_that_would_run_code_on_load_is_refused(tmp_path):
    """torch.load(weights_only=False) of this file would run a shell command; kvrl reads
    tensors and plain containers only, so resume names the global, runs nothing, and takes
    the checkpoint before it. (transformer-eval inputs: tests/conformance,
    test_a_pickled_callable_is_refused_without_running_it.)"""
    marker = tmp_path / "code_ran"
    run_dir = tmp_path / "run"
    result, _ = train(3, PPO, f"run.dir={run_dir}", *SMALL, "run.max_updates=1")
    assert result.returncode == 0, result.stderr[-3000:]
    torch.save({"format": "kvrl-checkpoint", "model": _RunsCodeWhenUnpickled(marker)},
               run_dir / "checkpoints" / "checkpoint-0000000009.pt")
    result, _ = train(3, "--resume", str(run_dir), "run.max_updates=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert stats(run_dir, 0)["resumed_from_update"] == 1
    log = open(run_dir / "rank0.log").read()
    assert "checkpoint-0000000009.pt': unreadable:" in log and "global 'posix system' is not allowed" in log
    assert not marker.exists()


def test_ctrl_c_in_a_terminal_stops_the_run_cleanly(tmp_path):
    """Ctrl-C signals the terminal's whole foreground process group; the wrapper keeps
    mpirun out of it and turns the interrupt into one clean stop."""
    process = subprocess.Popen([WRAPPER, "-np", "2", KVRL, "train", PPO, f"run.dir={tmp_path}", *SMALL],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (os.path.exists(tmp_path / "metrics.csv") and len(metrics(tmp_path)) >= 2):
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 75, err[-3000:]
    assert "kvrl train: interrupted (" in out
    learner = stats(tmp_path, 0)
    assert checkpoints(tmp_path)[-1] == f"checkpoint-{learner['updates']:010d}.pt"
