"""CartPole-v1 learns under mpiexec, 1 learner and 2 actors, with the shipped configs and
fixed seeds: mean return of the last 100 episodes >= 450 within 500k env steps for PPO
(configs/cartpole_ppo.yaml, about 2.5 min here) and for V-trace (configs/cartpole_vtrace.yaml,
128-step fragments, credit returned after training, contexts restarted at each weight
update, about 20 s). A uniformly random policy averages about 22. Asynchronous runs are
not bit-reproducible (which episodes a batch holds depends on rank timing); runs in
synchronous batches are. The margins measured are in docs/training.md."""
import json
import os
import subprocess

import pytest

KVRL = os.environ.get("KVRL_BIN")
CONFIGS = os.path.join(os.path.dirname(__file__), "..", "..", "configs")
BUDGETS = {"cartpole_ppo.yaml": 500000, "cartpole_vtrace.yaml": 500000}


@pytest.mark.parametrize("config", sorted(BUDGETS))
def test_cartpole_reaches_450_within_the_budget(tmp_path, config):
    budget = BUDGETS[config]
    result = subprocess.run(
        ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-np", "3", KVRL, "train",
         os.path.join(CONFIGS, config), f"run.dir={tmp_path}", f"run.total_env_steps={budget}", "run.seed=1"],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, OMPI_MCA_btl="self,vader"))
    assert result.returncode == 0, result.stderr[-3000:]
    learner = json.load(open(tmp_path / "rank0.json"))
    assert learner["env_steps"] <= budget + 4096 * 2, learner
    assert learner["mean_return"] >= 450, learner


def test_cartpole_with_a_sliding_window_of_32_reaches_475_on_500_step_episodes(tmp_path):
    """Episodes of 500 steps against a 64-step context (configs/cartpole_sliding_ppo.yaml:
    64-step fragments with their context prefixes, a ring cache of 32 slots): the mean
    return first reaches 475 within 500k env steps and ends at 450 or more (seen: 475 at
    111k-128k, 500 at the end, seeds 1-3; about 1.5 min)."""
    result = subprocess.run(
        ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-np", "3", KVRL, "train",
         os.path.join(CONFIGS, "cartpole_sliding_ppo.yaml"), f"run.dir={tmp_path}", "run.seed=1"],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, OMPI_MCA_btl="self,vader"))
    assert result.returncode == 0, result.stderr[-3000:]
    learner = json.load(open(tmp_path / "rank0.json"))
    metrics = [json.loads(line) for line in open(tmp_path / "metrics.jsonl")]
    reached = [m["env_steps"] for m in metrics if m["episode/return_mean"] >= 475]
    assert reached and reached[0] <= 500000, [m["episode/return_mean"] for m in metrics][-20:]
    assert learner["mean_return"] >= 450, learner


def train_in_synchronous_batches(run_dir, total_env_steps):
    """TorchRL's collection: each actor acts exactly its 2048 steps of credit on the newest
    weights, cuts what is open and waits for the next weights; 4096 steps per update."""
    result = subprocess.run(
        ["mpiexec", "--oversubscribe", "--allow-run-as-root", "-np", "3", KVRL, "train",
         os.path.join(CONFIGS, "cartpole_ppo.yaml"), f"run.dir={run_dir}", f"run.total_env_steps={total_env_steps}",
         "run.seed=1", "actor.collect=batches", "learner.credit_return=when_trained", "actor.credit_steps=2048",
         "learner.recompute_advantages=true"],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, OMPI_MCA_btl="self,vader"))
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in open(run_dir / "metrics.jsonl")]


def test_cartpole_with_torchrls_synchronous_batches_trains_each_step_on_the_weights_that_acted_it(tmp_path):
    """actor.collect=batches with learner.credit_return=when_trained and 2048 steps of credit
    per actor (two actors, 4096 steps per update): the actors act exactly one batch on the
    newest weights, cut what is open, and wait for the next weights, as TorchRL's collector.
    Every update trains on exactly 4096 steps, none acted by older weights (policy lag 0),
    and CartPole learns: the mean return of the last 100 episodes is >= 400 at the end of
    250k env steps. Such a run is reproducible from its seed (the case below); how seeds
    1-12 end is in docs/testing.md."""
    metrics = train_in_synchronous_batches(tmp_path, 250000)
    steps = [m["env_steps"] for m in metrics]
    assert all(later - earlier == 4096 for earlier, later in zip([0] + steps, steps)), steps[:10]
    assert max(m["policy_lag/max"] for m in metrics) == 0, [m["policy_lag/max"] for m in metrics]
    learner = json.load(open(tmp_path / "rank0.json"))
    assert learner["mean_return"] >= 400, learner


def test_synchronous_batches_reproduce_a_run_from_its_seed(tmp_path):
    """Every batch holds the same episodes whatever order the two actors' messages arrive
    in, and the learner orders them before packing: two runs of 8 updates with one seed
    give the same losses and returns bit for bit (one thread per process, one machine).
    Packed in arrival order, two such runs parted at the first update."""
    runs = [train_in_synchronous_batches(tmp_path / name, 8 * 4096) for name in ("first", "second")]
    assert len(runs[0]) == len(runs[1]) == 8, [len(run) for run in runs]
    keys = ["loss/policy", "loss/value", "ppo/approx_kl", "episode/return_mean", "acting/kl"]
    for update, (first, second) in enumerate(zip(*runs), start=1):
        assert [first[k] for k in keys] == [second[k] for k in keys], (update, first, second)
