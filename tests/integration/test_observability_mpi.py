"""What a user watches and uses around a run, under mpiexec: TensorBoard event files and
metrics.jsonl, the live HTTP status, the progress line, log levels, and `kvrl eval` /
`kvrl export` of a checkpoint. Every run is bounded in time."""
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import time

import gymnasium
import pytest
import torch
from tensordict import TensorDict
from torchrl.modules import TransformerModule, set_recurrent_mode

KVRL = os.environ.get("KVRL_BIN")
ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
WRAPPER = os.path.join(ROOT, "launch", "kvrl-mpirun")
PPO = os.path.join(ROOT, "configs", "cartpole_ppo.yaml")
SMALL = ["learner.steps_per_update=1024", "actor.credit_steps=1024", "run.total_env_steps=10000000"]


def train(ranks, *args, env=None, timeout=180):
    return subprocess.run([WRAPPER, "-np", str(ranks), KVRL, "train", *args], capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, **(env or {})))


def kvrl(*args, timeout=120):
    return subprocess.run([KVRL, *args], capture_output=True, text=True, timeout=timeout)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def jsonl(run_dir):
    return [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]


@pytest.mark.parametrize("algorithm,specific", [("ppo", ["ppo/approx_kl", "ppo/clip_fraction"]),
                                                ("vtrace", ["vtrace/rho_mean", "vtrace/rho_max"])])
def test_tensorboard_event_files_hold_the_jsonl_series(tmp_path, algorithm, specific):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    # A lag limit of 1 drops stale episodes, so the dropped-by-reason series exist too.
    result = train(3, PPO, f"run.dir={tmp_path}", *SMALL, "run.max_updates=6", f"learner.algorithm={algorithm}",
                   "learner.max_policy_lag=1")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = jsonl(tmp_path)
    assert [r["update"] for r in rows] == list(range(1, 7))
    events = EventAccumulator(str(tmp_path / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    expected = {"episode/return_mean", "episode/length_mean", "loss/policy", "loss/value", "loss/entropy",
                "policy_lag/mean", "policy_lag/max", "throughput/env_steps_per_s", "throughput/updates_per_s",
                "learner/packing_efficiency", "learner/queue_depth", "optimizer/grad_norm",
                "optimizer/entropy_coef", *specific}
    assert expected <= tags, expected - tags
    assert any(tag.startswith("dropped/") for tag in tags), tags
    for tag in tags:
        scalars = events.Scalars(tag)
        in_jsonl = [(r["env_steps"], r[tag]) for r in rows if tag in r]
        assert [s.step for s in scalars] == [step for step, _ in in_jsonl], tag
        # TensorBoard stores float32.
        assert [s.value for s in scalars] == pytest.approx([v for _, v in in_jsonl], rel=1e-6, abs=1e-6), tag
    # CartPole pays 1 per step: the return and length series, computed apart, must agree.
    for row in rows:
        assert row["episode/return_mean"] == pytest.approx(row["episode/length_mean"], rel=1e-6), row
    # The per-interval throughput agrees with the run's overall rate within a factor of 3.
    learner = json.load(open(tmp_path / "rank0.json"))
    overall = learner["env_steps"] / learner["wall_seconds"]
    mean_rate = sum(r["throughput/env_steps_per_s"] for r in rows) / len(rows)
    assert overall / 3 < mean_rate < overall * 3, (mean_rate, overall)


def get(port, path, method="GET"):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path)
    response = connection.getresponse()
    return response.status, response.getheader("Content-Type"), response.read().decode()


def raw_request(port, data):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        return s.recv(200).split(b"\r\n")[0].decode()


def prometheus(text):
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_live_status_over_http_survives_bad_requests(tmp_path):
    port = free_port()
    process = subprocess.Popen([WRAPPER, "-np", "3", KVRL, "train", PPO, f"run.dir={tmp_path}", *SMALL,
                                f"status.port={port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, content_type, body = get(port, "/status")
                if json.loads(body)["counters"]["updates"] >= 2:
                    break
            except (ConnectionError, OSError):
                pass
            assert time.monotonic() < deadline, "no status within 60 s"
            time.sleep(0.5)
        assert status == 200 and content_type == "application/json"
        first = json.loads(body)
        assert first["state"] == "training" and first["algorithm"] == "ppo"
        assert first["ranks"] == {"world_size": 3, "learners": [0], "actors": [1, 2]}
        assert re.fullmatch(r"[0-9a-f]{8}", first["config_hash"])
        assert first["versions"]["policy"] == first["counters"]["updates"]
        assert first["versions"]["checkpoint_format"] == 1

        # A client that connects and sends nothing does not block the others.
        idle = socket.create_connection(("127.0.0.1", port))
        assert raw_request(port, b"GARBAGE\r\n\r\n") == "HTTP/1.1 400 Bad Request"
        assert raw_request(port, b"GET /status SPDY/3\r\n\r\n") == "HTTP/1.1 400 Bad Request"
        assert raw_request(port, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\n\r\n") == \
            "HTTP/1.1 431 Request Header Fields Too Large"
        assert get(port, "/status", method="POST")[0] == 405
        assert get(port, "/secrets")[0] == 404
        assert get(port, "/metrics", method="HEAD")[0] == 200

        status, content_type, text = get(port, "/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        metrics = prometheus(text)
        assert metrics["kvrl_updates_total"] >= first["counters"]["updates"]
        assert metrics["kvrl_env_steps_total"] > 0 and "kvrl_episode_return_mean" in metrics
        assert "# TYPE kvrl_env_steps_total counter" in text
        time.sleep(3)
        later = json.loads(get(port, "/status")[2])
        assert later["counters"]["env_steps"] > first["counters"]["env_steps"]
        idle.settimeout(10)
        assert idle.recv(1) == b""  # the idle client was dropped after 5 s
        idle.close()
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    assert process.returncode == 75


def test_a_bad_status_address_or_progress_mode_is_refused(tmp_path):
    result = train(3, PPO, f"run.dir={tmp_path}", "status.address=localhost", timeout=60)
    assert result.returncode == 2
    assert "config key 'status.address' = 'localhost': expected an IPv4 or IPv6 address" in result.stderr
    result = train(3, PPO, f"run.dir={tmp_path}", env={"KVRL_PROGRESS": "fancy"}, timeout=60)
    assert result.returncode == 2
    assert "KVRL_PROGRESS 'fancy' must be inplace, plain or auto" in result.stderr


@pytest.mark.parametrize("mode", ["plain", "inplace"])
def test_progress_line_in_place_on_a_terminal_plain_otherwise(tmp_path, mode):
    result = train(3, PPO, f"run.dir={tmp_path}", *SMALL, "run.max_updates=12", "run.log_interval_s=0.2",
                   env={"KVRL_PROGRESS": mode})
    assert result.returncode == 0, result.stderr[-3000:]
    pattern = r"env steps \d+ \(\d+/s\) \| updates \d+ \([\d.]+/s\) \| return [\d.]+ \| lag [\d.]+/\d+ \| queue \d+"
    if mode == "plain":
        lines = [line for line in result.stdout.splitlines() if line.startswith("progress: ")]
        assert len(lines) >= 2 and all(re.search(pattern, line) for line in lines), result.stdout
        assert "\r" not in result.stdout
    else:
        # "\r\x1b[K": back to the line's start and clear it (text mode reads the \r as a newline).
        assert "\x1b[K" in result.stdout and "progress: " not in result.stdout
        assert re.search(pattern, result.stdout.split("\x1b[K")[-1])
    # The last line is still the summary, on a line of its own.
    assert result.stdout.splitlines()[-1].startswith("kvrl train: finished:")
    assert re.search("progress: " + pattern, open(tmp_path / "rank0.log").read())


def test_log_level_from_the_config_and_the_environment(tmp_path):
    result = train(3, PPO, f"run.dir={tmp_path}", *SMALL, "run.max_updates=2", "run.log_level=warn")
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in range(3):
        assert "[info]" not in open(tmp_path / f"rank{rank}.log").read()
    result = train(3, PPO, f"run.dir={tmp_path}", *SMALL, "run.max_updates=2", "run.log_level=warn",
                   env={"KVRL_LOG_LEVEL": "info"})
    assert result.returncode == 0, result.stderr[-3000:]
    line = open(tmp_path / "rank1.log").readline()
    # time, rank, role and level on every line
    assert re.match(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[rank 1 actor\] \[info\] ", line), line


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A checkpoint after 30 updates of 1024 steps (~15 s), and one after a single update."""
    run_dir = tmp_path_factory.mktemp("trained")
    result = train(3, PPO, f"run.dir={run_dir}", *SMALL, "run.max_updates=30", "checkpoint.interval_updates=1",
                   "checkpoint.keep=30")
    assert result.returncode == 0, result.stderr[-3000:]
    folder = run_dir / "checkpoints"
    return str(folder / "checkpoint-0000000030.pt"), str(folder / "checkpoint-0000000001.pt")


def evaluate(checkpoint, *args):
    result = kvrl("eval", checkpoint, *args)
    assert result.returncode == 0, result.stderr
    mean, std = map(float, re.search(r"return: mean ([\d.]+) std ([\d.]+)", result.stdout).groups())
    lengths = [int(n) for n in re.search(r"lengths:((?: \d+)+)", result.stdout).group(1).split()]
    return mean, std, lengths, result.stdout


def test_eval_plays_the_saved_policy(trained):
    late, early = trained
    mean, std, lengths, out = evaluate(late, "--episodes", "8", "--seed", "5")
    assert len(lengths) == 8 and mean == pytest.approx(sum(lengths) / 8)  # CartPole pays 1 per step
    assert "CartPole-v1, 8 episodes, seed 5, sampled actions" in out
    assert evaluate(late, "--episodes", "8", "--seed", "5")[3] == out  # same seed, same episodes
    greedy, _, _, out = evaluate(late, "--episodes", "8", "--seed", "5", "--greedy")
    assert "greedy actions" in out
    untrained, _, _, _ = evaluate(early, "--episodes", "8", "--seed", "5", "--greedy")
    assert greedy > 2 * untrained, (greedy, untrained)


@pytest.mark.parametrize("args,message", [
    (["--episodes", "0"], "--episodes '0' must be an integer in [1, 10000]"),
    (["--env", "Acrobot-v1"], "does not fit the environment"),
    (["--env", "Nope-v0"], "unknown environment 'Nope-v0'"),
    (["--sed", "1"], "unknown argument '--sed'"),
])
def test_eval_refuses_bad_arguments(trained, args, message):
    result = kvrl("eval", trained[0], *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_eval_of_a_missing_or_corrupt_checkpoint_names_it(tmp_path):
    result = kvrl("eval", str(tmp_path / "none.pt"))
    assert result.returncode == 2 and "none.pt" in result.stderr
    (tmp_path / "bad.pt").write_bytes(b"not a checkpoint")
    result = kvrl("eval", str(tmp_path / "bad.pt"))
    assert result.returncode == 2 and f"checkpoint '{tmp_path}/bad.pt': unreadable" in result.stderr


def test_export_loads_into_torchrl_and_plays_like_kvrl(trained, tmp_path):
    out = tmp_path / "policy.pt"
    result = kvrl("export", trained[0], str(out))
    assert result.returncode == 0, result.stderr
    exported = torch.load(out, weights_only=True)
    module = TransformerModule(**exported["config"], in_key="observation", out_key="embedding")
    module.load_state_dict(exported["transformer"], strict=True)
    policy_head = torch.nn.Linear(exported["config"]["hidden_size"], exported["policy"]["num_outputs"])
    policy_head.load_state_dict(exported["policy_head"])
    assert exported["policy"] == {"discrete": True, "num_outputs": 2, "temporal_context": True, "critic": "trunk",
                                  "env": "CartPole-v1"}
    torch.nn.Linear(exported["config"]["hidden_size"], 1).load_state_dict(exported["value_head"])

    # The same weights through kvrl's window path give the same embeddings.
    features = torch.randn(2, 7, exported["config"]["input_size"])
    is_init = torch.zeros(2, 7, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[1, 4] = True
    torch.save({"config": exported["config"], "state_dict": exported["transformer"], "features": features,
                "is_init": is_init}, tmp_path / "in.pt")
    assert kvrl("transformer-eval", str(tmp_path / "in.pt"), str(tmp_path / "eval.pt")).returncode == 0
    theirs = torch.load(tmp_path / "eval.pt", weights_only=True)["window"]
    with set_recurrent_mode(True), torch.no_grad():
        ours = module(TensorDict({"observation": features, "is_init": is_init.unsqueeze(-1)}, [2, 7]))["embedding"]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)

    # Played greedily in Gymnasium's CartPole, it does what kvrl eval says it does.
    env = gymnasium.make("CartPole-v1")
    returns = []
    for episode in range(3):
        observation, _ = env.reset(seed=episode)
        history, total, done = [], 0.0, False
        while not done:
            history.append(torch.as_tensor(observation, dtype=torch.float32))
            window = torch.stack(history).unsqueeze(0)
            init = torch.zeros(1, len(history), 1, dtype=torch.bool)
            init[0, 0] = True
            with set_recurrent_mode(True), torch.no_grad():
                embedding = module(TensorDict({"observation": window, "is_init": init}, [1, len(history)]))["embedding"]
                action = int(policy_head(embedding[0, -1]).argmax())
            observation, reward, terminated, truncated, _ = env.step(action)
            total += reward
            done = terminated or truncated
        returns.append(total)
    kvrl_greedy, _, _, _ = evaluate(trained[0], "--episodes", "8", "--greedy")
    assert sum(returns) / 3 > 0.4 * kvrl_greedy, (returns, kvrl_greedy)
    assert sum(returns) / 3 > 60, returns


def test_a_separate_mlp_critic_trains_plays_and_exports_as_a_torch_sequential(tmp_path):
    run_dir = tmp_path / "run"
    result = train(2, PPO, f"run.dir={run_dir}", *SMALL, "run.max_updates=2", "checkpoint.interval_updates=1",
                   "model.critic=mlp", "model.critic_hidden_size=32")
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = str(run_dir / "checkpoints" / "checkpoint-0000000002.pt")
    evaluate(checkpoint, "--episodes", "2")
    out = tmp_path / "policy.pt"
    assert kvrl("export", checkpoint, str(out)).returncode == 0
    exported = torch.load(out, weights_only=True)
    assert exported["policy"]["critic"] == "mlp" and "value_head" not in exported
    critic = torch.nn.Sequential(torch.nn.Linear(4, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                                 torch.nn.Linear(32, 1))
    critic.load_state_dict(exported["critic"], strict=True)
    values = critic(torch.randn(5, 4)).squeeze(-1)
    assert torch.isfinite(values).all() and values.std() > 0


def test_rank_reports_are_json_whatever_the_run_directory_is_called(tmp_path):
    # A quote, a backslash and a non-ASCII letter: what a hand-written JSON writer gets wrong.
    run_dir = tmp_path / 'run "quoted" back\\slash é'
    result = train(3, PPO, f"run.dir={run_dir}", *SMALL, "run.max_updates=2", "checkpoint.interval_updates=1")
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.load(open(run_dir / f"rank{rank}.json", encoding="utf-8")) for rank in range(3)]
    learner = reports[0]
    assert learner["role"] == "learner" and learner["updates"] == 2
    assert learner["last_checkpoint"].startswith(str(run_dir)), learner["last_checkpoint"]
    assert os.path.exists(learner["last_checkpoint"])
    assert [r["role"] for r in reports[1:]] == ["actor", "actor"]
    assert sum(r["episodes_sent"] for r in reports[1:]) == learner["episodes_received"]
    assert [row["update"] for row in jsonl(run_dir)] == [1, 2]
