"""Learning runs under launch/kvrl-mpirun, 1 learner + 2 actors unless --ranks says otherwise:
the native MuJoCo tasks (configs/mujoco_ppo.yaml, 1M env steps) and image tasks through the
Gymnasium bridge (MinAtar's Breakout, MiniGrid's MemoryS7, with the CNN encoder) of issue #20,
and CartPole with PPO and V-trace (issue #23's sample-efficiency and V-trace sweeps; --set
adds config overrides to every run).

Reported per run: the mean return of the last 100 episodes at the end, the best such mean
during the run, the env steps at which the mean first reached the target ("-" when it
never did), the wall time, and means over the updates after the 20th of the policy lag,
the acting KL (from the acting policy to the learner's at the batch start), and for PPO
the approximate KL from the behaviour policy over an update and the fraction of steps
clipped. The MuJoCo targets are the issue's, set against CleanRL's
PPO at 1M steps (2231 Hopper, 1823 HalfCheetah, 3050 Walker2d on the v2/v4 tasks). The
ablations (".../no_context") run the same config with model.temporal_context=false.
Breakout's target is ten times a random policy's mean return (0.38 over 1000 episodes).

    python bench/learning_runs.py --only hopper --seeds 1 2 3 --out bench/results/mujoco_runs.json
    python bench/learning_runs.py --only breakout breakout/no_context --seeds 1 2 3
    python bench/learning_runs.py --only hopper --seeds 1 --steps 300000
    python bench/learning_runs.py --from-runs DIR --seeds 1 2 3      # the table again, from --keep-runs DIR
    python bench/learning_runs.py --only cartpole_vtrace --seeds 1 2 3 4 5
    python bench/learning_runs.py --only cartpole_ppo --ranks 2 --seeds 1 2 3 4 5 6 \
        --set actor.credit_steps=4096 --set learner.recompute_advantages=true
    python bench/learning_runs.py --only cartpole_ppo --ranks 2 --seeds 1 2 3 4 5 6 --target 100 \
        --set actor.credit_steps=4096 --set run.max_updates=25      # env steps to a return of 100
"""
import argparse
import hashlib
import json
import subprocess
import tempfile
import time
from pathlib import Path

from long_episode_runs import first_reaching

ROOT = Path(__file__).resolve().parent.parent

MUJOCO = "mujoco_ppo.yaml"
NO_CONTEXT = ["model.temporal_context=false"]
# name: (config, overrides, target mean return, env steps)
RUNS = {
    "hopper": (MUJOCO, ["env.name=Hopper-v5"], 2000, 1_000_000),
    "halfcheetah": (MUJOCO, ["env.name=HalfCheetah-v5"], 1500, 1_000_000),
    "walker2d": (MUJOCO, ["env.name=Walker2d-v5"], 2500, 1_000_000),
    # Fully observed: each step sees only its own observation (docs/training.md, Walker2d).
    "walker2d/no_context": (MUJOCO, ["env.name=Walker2d-v5", *NO_CONTEXT], 2500, 1_000_000),
    # Partially observed: joint positions only, so velocities come from the history, and the
    # values must come from the trunk too (the MLP critic sees one observation).
    "hopper_positions": (MUJOCO, ["env.name=Hopper-v5", "env.observe=positions", "model.critic=trunk"], 1000,
                         500_000),
    "hopper_positions/no_context": (MUJOCO, ["env.name=Hopper-v5", "env.observe=positions", "model.critic=trunk",
                                             *NO_CONTEXT], 1000, 500_000),
    "breakout": ("minatar_breakout_ppo.yaml", [], 3.8, 2_000_000),
    "breakout/no_context": ("minatar_breakout_ppo.yaml", NO_CONTEXT, 3.8, 2_000_000),
    # Success pays 1 - 0.9 * steps / 245; the two doors make a memoryless policy a coin flip.
    "memory_s7": ("minigrid_memory_ppo.yaml", [], 0.8, 4_000_000),
    "memory_s7/no_context": ("minigrid_memory_ppo.yaml", NO_CONTEXT, 0.8, 4_000_000),
    # Issue #23: PPO's env steps to 400 (TorchRL's, bench/training_bench.py), and V-trace's
    # mean return at 500k against 475.
    "cartpole_ppo": ("cartpole_ppo.yaml", [], 400, 250_000),
    "cartpole_vtrace": ("cartpole_vtrace.yaml", [], 475, 500_000),
}


# How far the data is off-policy and how far each update moves the policy: means over the
# updates after the first WARM_UP (the first ones have no lag yet); PPO's two only for PPO.
WARM_UP = 20
UPDATE_MEANS = {"policy_lag": "policy_lag/mean", "acting_kl": "acting/kl", "update_kl": "ppo/approx_kl",
                "clip_fraction": "ppo/clip_fraction"}


def update_means(metrics):
    later = metrics[WARM_UP:] or metrics
    return {name: sum(m[key] for m in later) / len(later) if key in later[0] else None
            for name, key in UPDATE_MEANS.items()}


def summarize(run_dir, name, seed, target):
    learner = json.loads((run_dir / "rank0.json").read_text())
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_to_target, wall_to_target = first_reaching(metrics, target)
    return {"name": name, "seed": seed, "target": target, "mean_return": learner["mean_return"],
            "best_mean_return": max(m["episode/return_mean"] for m in metrics),
            "env_steps": learner["env_steps"], "steps_to_target": steps_to_target,
            "wall_to_target_s": wall_to_target, "learner_wall_s": learner["wall_seconds"],
            **update_means(metrics), "run_dir": str(run_dir)}


def run_folder(name, ranks=3, extra=()):
    """A run's folder under --keep-runs: candidates with other --ranks or --set get their own."""
    folder = name.replace("/", "_")
    if ranks != 3 or extra:
        folder += f"_r{ranks}_" + hashlib.sha1(" ".join(extra).encode()).hexdigest()[:8]
    return folder


def run(kvrl, name, seed, steps, keep_dir, ranks=3, extra=(), target=None):
    config, overrides, default_target, default_steps = RUNS[name]
    target = default_target if target is None else target
    overrides = [*overrides, *extra]
    steps = steps or default_steps
    run_dir = Path(keep_dir) / run_folder(name, ranks, extra) / f"seed{seed}"
    command = [str(ROOT / "launch" / "kvrl-mpirun"), "-np", str(ranks), kvrl, "train",
               str(ROOT / "configs" / config), f"run.dir={run_dir}", f"run.seed={seed}",
               f"run.total_env_steps={steps}", *overrides]
    begin = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=7200)
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed ({result.returncode}): {result.stderr[-2000:]}")
    row = summarize(run_dir, name, seed, target)
    row.update({"config": config, "overrides": overrides, "wall_s": time.perf_counter() - begin})
    return row


def show(row):
    to_target = "-" if row["steps_to_target"] is None else f"{row['steps_to_target']:,}"
    means = " | ".join("-" if row[name] is None else f"{row[name]:.3g}" for name in UPDATE_MEANS)
    print(f"| {row['name']} | {row['seed']} | {row['mean_return']:.4g} | {row['best_mean_return']:.4g} | "
          f"{row['target']} | {to_target} | {row['env_steps']:,} | {row['learner_wall_s']:.0f} s | {means} |",
          flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvrl", default=str(ROOT / "build" / "launch" / "kvrl"))
    parser.add_argument("--only", nargs="*", choices=sorted(RUNS), help="these runs only (default: all)")
    parser.add_argument("--seeds", type=int, nargs="*", default=[1])
    parser.add_argument("--steps", type=int, help="env steps of every run (default: each run's own)")
    parser.add_argument("--ranks", type=int, default=3, help="MPI ranks: 1 learner and the rest actors")
    parser.add_argument("--target", type=float, help="the return to report env steps to (default: each run's own)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override for every run (repeatable)")
    parser.add_argument("--keep-runs", help="keep the run directories here (default: a temporary folder)")
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--from-runs", help="train nothing: summarize the runs kept earlier with --keep-runs DIR")
    args = parser.parse_args()
    if args.ranks < 2 or any("=" not in item for item in args.set):
        parser.error(f"--ranks {args.ranks} --set {args.set}: expected at least 2 ranks and KEY=VALUE overrides")
    names = args.only or list(RUNS)
    print(f"(policy lag, acting KL, update KL, clipped: means over the updates after the first {WARM_UP})")
    print("| run | seed | final return | best mean return | target | env steps to target | env steps | wall | "
          "policy lag | acting KL | update KL | clipped |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    if args.from_runs:
        rows = []
        for seed in args.seeds:
            for name in names:
                run_dir = Path(args.from_runs) / run_folder(name, args.ranks, args.set) / f"seed{seed}"
                if (run_dir / "metrics.jsonl").exists():
                    rows.append(summarize(run_dir, name, seed, RUNS[name][2] if args.target is None else args.target))
                    rows[-1].update({"config": RUNS[name][0], "overrides": RUNS[name][1]})
                    show(rows[-1])
        if args.out:
            Path(args.out).write_text(json.dumps({"runs": rows}, indent=1) + "\n")
        return
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        keep = args.keep_runs or scratch
        for seed in args.seeds:
            for name in names:
                rows.append(run(args.kvrl, name, seed, args.steps, keep, args.ranks, args.set, args.target))
                show(rows[-1])
                if args.out:
                    Path(args.out).write_text(json.dumps({"runs": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
