"""Elastic actors (docs/reliability.md "Elastic actors"): `kvrl actor --connect` processes
join a running `kvrl train` over TCP, are refused with a named reason when their token or
config is wrong, and may be killed and restarted at any time while the run still learns."""
import json
import os
import random
import signal
import socket
import subprocess
import time

KVRL = os.environ.get("KVRL_BIN")
CONFIG = os.path.join(os.path.dirname(__file__), "..", "..", "configs", "cartpole_ppo.yaml")
ENV = dict(os.environ, OMPI_MCA_btl="self,vader")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_training(tmp_path, port, *overrides):
    token = tmp_path / "run.token"
    token.write_text("s3cret-token\n")
    command = ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-np", "2", KVRL, "train", CONFIG,
               f"run.dir={tmp_path / 'run'}", f"remote.port={port}", f"remote.token_file={token}", *overrides]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV), token


def start_actor(token, port, *overrides):
    command = [KVRL, "actor", CONFIG, "--connect", f"127.0.0.1:{port}", "--token-file", str(token),
               "--connect-timeout", "60", *overrides]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(ENV, OMP_NUM_THREADS="1"))


def learner_report(tmp_path):
    return json.load(open(tmp_path / "run" / "rank0.json"))


def test_remote_actors_join_train_and_are_told_to_stop(tmp_path):
    port = free_port()
    training, token = start_training(tmp_path, port, "run.max_updates=8", "learner.steps_per_update=1024",
                                     "actor.credit_steps=1024", "run.total_env_steps=1000000")
    actors = [start_actor(token, port, "actor.credit_steps=1024") for _ in range(2)]
    try:
        out, err = training.communicate(timeout=300)
        assert training.returncode == 0, err[-3000:]
        results = [actor.communicate(timeout=60) for actor in actors]
    finally:
        for actor in actors:
            actor.kill()
    learner = learner_report(tmp_path)
    assert learner["remote_actors_joined"] == 2, learner
    assert learner["remote_connections"]["accepted"] == 2, learner
    remote_ids = [int(rank) for rank in learner["received_from"] if int(rank) >= 2]
    assert len(remote_ids) == 2, learner["received_from"]
    for actor, (actor_out, actor_err) in zip(actors, results):
        assert actor.returncode == 0, actor_err[-2000:]
        last = actor_out.strip().splitlines()[-1]
        assert last.startswith("kvrl actor: finished: env_steps="), actor_out
        sent = int(last.split("episodes_sent=")[1].split()[0])
        actor_id = int((actor_out + actor_err).split(" as actor ")[1].split()[0])
        # Every episode it sent arrived: used, or dropped with a reason at the stop.
        assert learner["received_from"][str(actor_id)] == sent, (actor_id, sent, learner["received_from"])
    assert learner["episodes_received"] == learner["episodes_used"] + sum(learner["dropped"].values())


def test_a_remote_actor_asked_to_stop_leaves_and_the_run_goes_on(tmp_path):
    port = free_port()
    training, token = start_training(tmp_path, port, "run.max_updates=40", "learner.steps_per_update=512",
                                     "actor.credit_steps=512", "run.total_env_steps=1000000")
    log = tmp_path / "actor.log"
    actor = start_actor(token, port, "actor.credit_steps=512", "--log", str(log))
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (log.exists() and "acting with policy version" in log.read_text()):
            time.sleep(0.2)
        actor.send_signal(signal.SIGTERM)
        out, err = actor.communicate(timeout=60)
        assert actor.returncode == 75, err[-2000:]
        assert out.strip().splitlines()[-1].startswith("kvrl actor: stopped: env_steps="), out
        assert training.poll() is None, "the run must go on without it"
        train_out, train_err = training.communicate(timeout=300)
    finally:
        actor.kill()
        training.kill()
    assert training.returncode == 0, train_err[-3000:]
    learner = learner_report(tmp_path)
    assert learner["remote_actors_joined"] == 1 and learner["remote_actors_left"] == 1, learner
    assert learner["updates"] == 40, learner
    assert "was asked to stop: letting it leave" in open(tmp_path / "run" / "rank0.log").read()


def test_a_wrong_token_or_config_is_refused_naming_why(tmp_path):
    port = free_port()
    training, token = start_training(tmp_path, port, "run.max_updates=40", "learner.steps_per_update=512",
                                     "actor.credit_steps=512", "run.total_env_steps=1000000")
    try:
        wrong = tmp_path / "wrong.token"
        wrong.write_text("guess\n")
        out, err = start_actor(wrong, port, "actor.credit_steps=512").communicate(timeout=120)
        assert "refused: wrong token" in err, err
        differs = start_actor(token, port, "actor.credit_steps=512", "model.hidden_size=32")
        out, err = differs.communicate(timeout=120)
        assert differs.returncode == 2 and "refused: config hash" in err, err
        assert "the model, environment or actor keys differ from the training's config" in err, err
    finally:
        training.communicate(timeout=300)
    assert training.returncode == 0
    refused = learner_report(tmp_path)["remote_connections"]
    assert refused.get("refused_token") == 1 and refused.get("refused_config") == 1, refused


def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:  # it has just exited
        pass
    return None


def learner_pid(training):
    """Rank 0 under mpiexec: the `kvrl train` child started first (the lowest pid)."""
    children = subprocess.run(["pgrep", "-P", str(training.pid)], capture_output=True, text=True).stdout.split()
    ranks = []
    for child in children:
        try:
            if "train" in open(f"/proc/{child}/cmdline").read():
                ranks.append(int(child))
        except OSError:
            pass
    return min(ranks) if len(ranks) == 2 else None


def test_killing_and_restarting_remote_actors_at_random_still_learns(tmp_path):
    """Chaos, as RLlib's crashing-env tests do: two remote actors beside one MPI actor, one
    of them killed (SIGKILL) and a new one started every 2-10 s. The run still reaches a
    mean return of 450 within 500k env steps, learner 0's memory stays bounded, and every
    episode that arrived is accounted for."""
    port = free_port()
    training, token = start_training(tmp_path, port, "run.total_env_steps=500000", "run.seed=1",
                                     "actor.credit_steps=4096")
    rng = random.Random(7)
    actors = [start_actor(token, port, "actor.credit_steps=4096") for _ in range(2)]
    kills, rss, outputs = 0, [], []
    deadline = time.time() + 900
    next_kill = time.time() + rng.uniform(2, 10)
    pid = None
    while training.poll() is None and time.time() < deadline:
        time.sleep(0.5)
        pid = pid or learner_pid(training)
        if pid and rss_kib(pid):
            rss.append(rss_kib(pid))
        if time.time() >= next_kill:
            victim = rng.randrange(len(actors))
            actors[victim].send_signal(signal.SIGKILL)
            outputs.append(actors[victim].communicate())
            actors[victim] = start_actor(token, port, "actor.credit_steps=4096")
            kills += 1
            next_kill = time.time() + rng.uniform(2, 10)
    out, err = training.communicate(timeout=60)
    for actor in actors:
        try:
            outputs.append(actor.communicate(timeout=30))
        except subprocess.TimeoutExpired:  # started as the run ended: still trying to connect
            actor.kill()
            outputs.append(actor.communicate())
    assert training.returncode == 0, err[-3000:]
    learner = learner_report(tmp_path)
    half = len(rss) // 2
    print(f"chaos: {kills} kills, {learner['remote_actors_joined']} joined, {learner['remote_actors_left']} left, "
          f"mean return {learner['mean_return']}, env steps {learner['env_steps']}, learner RSS max "
          f"{max(rss[:half]) // 1024} MiB first half / {max(rss[half:]) // 1024} MiB second half, "
          f"received {learner['episodes_received']}, dropped {learner['dropped']}, "
          f"connections {learner['remote_connections']}")
    assert kills >= 5, kills
    # Every actor that logged its welcome was counted as joined. An actor may be counted without
    # logging it when killed between the two, and one started as the run ended may never join.
    said_joined = sum(" as actor " in out + err for out, err in outputs)
    assert len(outputs) == kills + 2
    assert said_joined >= 5, said_joined
    assert said_joined <= learner["remote_actors_joined"] <= kills + 2, (said_joined, learner)
    assert learner["remote_connections"]["accepted"] == learner["remote_actors_joined"], learner
    # Those still connected at the end (two at most) are told to stop; every other one left.
    assert learner["remote_actors_left"] >= learner["remote_actors_joined"] - 2, learner
    assert learner["mean_return"] >= 450, learner
    assert learner["episodes_received"] == learner["episodes_used"] + sum(learner["dropped"].values()), learner
    # Bounded: the second half of the run holds no more than the first half did, plus slack.
    assert max(rss[half:]) <= max(rss[:half]) * 1.15 + 64 * 1024, (max(rss[:half]), max(rss[half:]))
