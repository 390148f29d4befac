"""Benchmark: end-to-end PPO training on CartPole-v1, kvrl against TorchRL, side by side.

Both sides train the same policy (a causal transformer trunk, hidden 64, 2 layers, 4 heads,
max_seq_len 512, with a categorical policy head and a value head) with the same PPO
settings as configs/cartpole_ppo.yaml (4096 env steps per update, 4 epochs x 8
minibatches, Adam 1e-3 with linear decay, clip 0.2, GAE 0.95, gamma 0.99, rewards x 0.01,
grad-norm clip 0.5), on 16 environments per actor, for the same env-step budget.

- kvrl: `kvrl train` under launch/kvrl-mpirun with 1 learner + A actors (MPI ranks).
- TorchRL: its Collector (A = 1, in the learner's process) or MultiSyncCollector (A worker
  processes), the reference TransformerModule, ClipPPOLoss and GAE. The windows are the
  collector's [16, 256] rows with validate_windows=False: TorchRL's weight sync calls
  mark_weight_update(), so every row restarts its context at the batch boundary on the
  acting side too, and the window path sees the same thing.

--kvrl-variant runs kvrl a second time with config overrides (e.g. contexts restarted at
every weight update, as TorchRL's collector does), against the same TorchRL run.

Measured: env steps/s and learner updates/s over the whole run (start-up included), the
mean return of the last 100 finished episodes at the end, and the time (and env steps)
each side needs until that mean first reaches --target-return: the speed at an equal
learning result. Each configuration runs once per repeat, alternating which side goes
first.

    python bench/training_bench.py --kvrl build/launch/kvrl --steps 300000 --target-return 400 \
        --kvrl-variant restart:actor.on_weight_update=restart --out bench/results/training_bench.json
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HIDDEN, LAYERS, HEADS, MAX_SEQ_LEN, NUM_ENVS = 64, 2, 4, 512, 16
STEPS_PER_UPDATE, EPOCHS, MINIBATCHES = 4096, 4, 8  # as configs/cartpole_ppo.yaml
LR, CLIP, GAMMA, LAMBDA, REWARD_SCALE, MAX_GRAD_NORM, VALUE_COEF = 1e-3, 0.2, 0.99, 0.95, 0.01, 0.5, 0.5


def run_kvrl(kvrl, actors, steps, seed, overrides=()):
    with tempfile.TemporaryDirectory() as run_dir:
        command = [str(ROOT / "launch" / "kvrl-mpirun"), "-np", str(actors + 1), kvrl, "train",
                   str(ROOT / "configs" / "cartpole_ppo.yaml"), f"run.total_env_steps={steps}",
                   f"run.dir={run_dir}", f"run.seed={seed}", "run.log_interval_s=1000",
                   # One actor alone must be allowed a whole batch in flight.
                   f"actor.credit_steps={max(2048, STEPS_PER_UPDATE // actors)}", *overrides]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        begin = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=3600)
        wall = time.perf_counter() - begin
        if done.returncode != 0:
            raise RuntimeError(f"kvrl failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        learner = json.loads((Path(run_dir) / "rank0.json").read_text())
        # The learner's clock starts after mpirun has started the ranks; count that too.
        metrics = [json.loads(line) for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines()]
        start_up = wall - learner["wall_seconds"]
        curve = [[start_up + m["wall_seconds"], m["env_steps"], m["episode/return_mean"]] for m in metrics]
    return {"env_steps": learner["env_steps"], "updates": learner["updates"], "wall_s": wall,
            "mean_return": learner["mean_return"], "curve": curve}


def torchrl_worker_env():
    from torchrl.envs import GymEnv, InitTracker, RewardSum, SerialEnv, TransformedEnv
    base = SerialEnv(NUM_ENVS, lambda: GymEnv("CartPole-v1", categorical_action_encoding=True))
    return TransformedEnv(base, InitTracker()).append_transform(RewardSum())


def torchrl_modules(observation_size, actions):
    import torch
    from tensordict.nn import TensorDictModule, TensorDictSequential
    from torchrl.modules import ProbabilisticActor, TransformerModule, ValueOperator
    from torch.distributions import Categorical

    trunk = TransformerModule(input_size=observation_size, hidden_size=HIDDEN, num_layers=LAYERS,
                              num_heads=HEADS, max_seq_len=MAX_SEQ_LEN, in_key="observation",
                              out_key="embed", validate_windows=False)
    policy_head = torch.nn.Linear(HIDDEN, actions)
    with torch.no_grad():
        policy_head.weight.mul_(0.01)
        policy_head.bias.zero_()
    actor = ProbabilisticActor(
        TensorDictSequential(trunk, TensorDictModule(policy_head, in_keys=["embed"], out_keys=["logits"])),
        in_keys=["logits"], out_keys=["action"], distribution_class=Categorical, return_log_prob=True)
    critic = TensorDictSequential(trunk, ValueOperator(torch.nn.Linear(HIDDEN, 1), in_keys=["embed"]))
    return actor, critic


def run_torchrl(actors, steps, seed):
    import torch
    from torchrl.collectors import Collector, MultiSyncCollector
    from torchrl.modules import set_recurrent_mode
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    torch.manual_seed(seed)
    probe = torchrl_worker_env()
    observation_size = probe.observation_spec["observation"].shape[-1]
    actions = probe.action_spec.space.n
    del probe
    actor, critic = torchrl_modules(observation_size, actions)
    if actors == 1:
        collector = Collector(torchrl_worker_env, actor, frames_per_batch=STEPS_PER_UPDATE, total_frames=steps)
    else:
        collector = MultiSyncCollector([torchrl_worker_env] * actors, actor,
                                       frames_per_batch=STEPS_PER_UPDATE, total_frames=steps)
    advantage = GAE(gamma=GAMMA, lmbda=LAMBDA, value_network=critic, shifted=True)
    loss = ClipPPOLoss(actor, critic, clip_epsilon=CLIP, entropy_coeff=0.0, critic_coeff=VALUE_COEF,
                       loss_critic_type="l2", normalize_advantage=True)
    optimizer = torch.optim.Adam(loss.parameters(), lr=LR, eps=1e-5)
    planned_updates = (steps + STEPS_PER_UPDATE - 1) // STEPS_PER_UPDATE
    recent_returns = []
    env_steps = updates = 0
    curve = []  # per update: seconds, env steps, mean return of the last 100 episodes
    begin = time.perf_counter()
    for batch in collector:
        # Rows: [streams, time]; a multi-worker batch stacks its workers' streams.
        batch = batch.reshape(-1, batch.shape[-1]) if batch.ndim > 2 else batch
        env_steps += batch.numel()
        done = batch["next", "done"].squeeze(-1)
        recent_returns.extend(batch["next", "episode_reward"].squeeze(-1)[done].tolist())
        recent_returns = recent_returns[-100:]
        batch["next", "reward"] = batch["next", "reward"] * REWARD_SCALE
        for group in optimizer.param_groups:
            group["lr"] = LR * max(0.0, 1.0 - updates / planned_updates)
        with set_recurrent_mode(True):
            for _ in range(EPOCHS):
                with torch.no_grad():
                    advantage(batch)
                order = torch.randperm(batch.shape[0])
                for minibatch in order.chunk(MINIBATCHES):
                    losses = loss(batch[minibatch])
                    total = losses["loss_objective"] + losses["loss_critic"]
                    optimizer.zero_grad()
                    total.backward()
                    torch.nn.utils.clip_grad_norm_(loss.parameters(), MAX_GRAD_NORM)
                    optimizer.step()
        updates += 1
        collector.update_policy_weights_()
        curve.append([time.perf_counter() - begin, env_steps, sum(recent_returns) / max(1, len(recent_returns))])
    wall = time.perf_counter() - begin
    collector.shutdown()
    return {"env_steps": env_steps, "updates": updates, "wall_s": wall,
            "mean_return": sum(recent_returns) / max(1, len(recent_returns)), "curve": curve}


LEVELS = (30, 50, 75, 100, 150, 200, 250, 300, 350, 400)


def print_levels(rows):
    """Per side, the mean over repeats of the env steps at which the mean return first
    reached each level (over the repeats that reached it): where in training a gap opens."""
    curves = {}
    for row in rows:
        curves.setdefault(row["kvrl_side"], []).append(row["kvrl_curve"])
        if row["kvrl_side"] == "kvrl":
            curves.setdefault("torchrl", []).append(row["torchrl_curve"])
    print("\nMean env steps to each mean return, over the repeats that reached it")
    print(f"{'side':<18}" + "".join(f"{level:>8}" for level in LEVELS))
    for side, runs in curves.items():
        cells = []
        for level in LEVELS:
            reached = [next(point[1] for point in curve if point[2] >= level)
                       for curve in runs if any(point[2] >= level for point in curve)]
            cells.append(f"{sum(reached) / len(reached) / 1000:.0f}k" if reached else "-")
        print(f"{side:<18}" + "".join(f"{cell:>8}" for cell in cells))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvrl", default=str(ROOT / "build" / "launch" / "kvrl"))
    parser.add_argument("--steps", type=int, default=100000, help="env steps per run (both sides)")
    parser.add_argument("--actors", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target-return", type=float, default=400,
                        help="the equal learning result: time until the mean return of the last 100 episodes first "
                             "reaches it")
    parser.add_argument("--kvrl-variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                        help="also run kvrl with these config overrides, beside its defaults and against the same "
                             "TorchRL run (repeatable), e.g. restart:actor.on_weight_update=restart")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "training_bench.json"))
    parser.add_argument("--torchrl-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--worker-actors", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--levels-from", metavar="JSON",
                        help="run nothing: print the env steps to each return level from an earlier --out file")
    args = parser.parse_args()
    if args.levels_from:
        print_levels(json.loads(Path(args.levels_from).read_text())["rows"])
        return
    variants = {"kvrl": []}
    for text in args.kvrl_variant:
        name, _, overrides = text.partition(":")
        pairs = [pair for pair in overrides.split(",") if pair]
        if not name or not pairs or any("=" not in pair for pair in pairs) or f"kvrl:{name}" in variants:
            parser.error(f"--kvrl-variant {text}: expected a new NAME:KEY=VALUE[,KEY=VALUE...], e.g. "
                         "restart:actor.on_weight_update=restart")
        variants[f"kvrl:{name}"] = pairs
    if args.torchrl_worker:
        print(json.dumps(run_torchrl(args.worker_actors, args.steps, args.seed)))
        return

    rows = []
    for actors in args.actors:
        for repeat in range(args.repeats):
            sides = [*variants, "torchrl"]
            order = sides if repeat % 2 == 0 else sides[::-1]
            results = {}
            for side in order:
                if side != "torchrl":
                    results[side] = run_kvrl(args.kvrl, actors, args.steps, args.seed + repeat, variants[side])
                    continue
                # A fresh interpreter per run, so worker processes and threads start clean.
                done = subprocess.run([sys.executable, __file__, "--torchrl-worker", "--worker-actors", str(actors),
                                       "--steps", str(args.steps), "--seed", str(args.seed + repeat)],
                                      capture_output=True, text=True, timeout=7200)
                if done.returncode != 0:
                    raise RuntimeError(f"TorchRL run failed:\n{done.stderr[-4000:]}")
                results[side] = json.loads(done.stdout.strip().splitlines()[-1])
            torchrl = results["torchrl"]
            for side in variants:
                rows.append({"actors": actors, "repeat": repeat, "kvrl_side": side, "kvrl_overrides": variants[side],
                             **{f"kvrl_{k}": v for k, v in results[side].items()},
                             **{f"torchrl_{k}": v for k, v in torchrl.items()}})

    def setup(row):
        return f"1L+{row['actors']}A {row['kvrl_side']}"

    width = max(len(setup(row)) for row in rows) + 2
    print(f"PPO on CartPole-v1, {args.steps} env steps per run, {os.cpu_count()} cores; kvrl against the TorchRL run "
          "of the same setup and repeat")
    for side, overrides in variants.items():
        print(f"  {side}: {' '.join(overrides) if overrides else 'configs/cartpole_ppo.yaml as it is'}")
    print(f"{'setup':<{width}}{'kvrl steps/s':>14}{'TorchRL steps/s':>17}{'ratio':>8}"
          f"{'kvrl upd/s':>12}{'TorchRL upd/s':>15}{'kvrl return':>13}{'TorchRL return':>16}")
    for row in rows:
        kvrl_rate = row["kvrl_env_steps"] / row["kvrl_wall_s"]
        torchrl_rate = row["torchrl_env_steps"] / row["torchrl_wall_s"]
        row["steps_per_s_ratio"] = kvrl_rate / torchrl_rate
        print(f"{setup(row):<{width}}{kvrl_rate:>14.0f}{torchrl_rate:>17.0f}"
              f"{row['steps_per_s_ratio']:>7.2f}x{row['kvrl_updates'] / row['kvrl_wall_s']:>12.2f}"
              f"{row['torchrl_updates'] / row['torchrl_wall_s']:>15.2f}{row['kvrl_mean_return']:>13.1f}"
              f"{row['torchrl_mean_return']:>16.1f}")
    target = args.target_return
    print(f"\nTime to the same learning result: mean return of the last 100 episodes >= {target:g}")
    print(f"{'setup':<{width}}{'kvrl s':>12}{'kvrl steps':>13}{'TorchRL s':>13}{'TorchRL steps':>15}{'ratio':>13}")
    for row in rows:
        for side in ("kvrl", "torchrl"):
            reached = next((point for point in row[f"{side}_curve"] if point[2] >= target), None)
            row[f"{side}_seconds_to_target"] = reached[0] if reached else None
            row[f"{side}_steps_to_target"] = reached[1] if reached else None
        kvrl_s, torchrl_s = row["kvrl_seconds_to_target"], row["torchrl_seconds_to_target"]
        row["time_to_target_ratio"] = torchrl_s / kvrl_s if kvrl_s and torchrl_s else None
        shown = lambda value, form: "not reached" if value is None else format(value, form)
        print(f"{setup(row):<{width}}{shown(kvrl_s, '.1f'):>12}"
              f"{shown(row['kvrl_steps_to_target'], 'd'):>13}{shown(torchrl_s, '.1f'):>13}"
              f"{shown(row['torchrl_steps_to_target'], 'd'):>15}"
              f"{shown(row['time_to_target_ratio'], '.2f') + ('x' if row['time_to_target_ratio'] else ''):>13}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"machine": platform.platform(), "cores": os.cpu_count(),
                                          "steps": args.steps, "target_return": target,
                                          "kvrl_variants": variants, "rows": rows}, indent=2))
    print(f"wrote {args.out}")
    print_levels(rows)


if __name__ == "__main__":
    main()
