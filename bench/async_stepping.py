"""Asynchronous against lockstep environment stepping (issue #24, part 3): PPO on CartPole-v1
(configs/cartpole_ppo.yaml, 1 learner + 2 actors under launch/kvrl-mpirun) with slow
environments whose step times vary 4x between the environments of an actor (env.step_delay_ms
and env.step_delay_spread: environment 0 sleeps D ms after each step, the last one 4D, the
others evenly in between). Both modes step the environments on the same threads
(env.step_threads = env.num_envs); lockstep waits for every environment before the policy
steps, async steps whichever are ready (env.min_ready of them at least).

Reported per mode and seed, side by side from one invocation: env steps/s (the learner's
env steps over its wall time), the ratio async / lockstep, the final mean return (last 100
episodes) and the env steps at which the mean first reached 400 ("-" when it never did).
The learning result is unchanged when the returns and steps to 400 stay within the
seed-to-seed spread of the lockstep runs.

    python bench/async_stepping.py --seeds 1 2 --out bench/results/async_stepping.json
    python bench/async_stepping.py --delay-ms 1 --steps 200000      # a shorter look
"""
import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from long_episode_runs import first_reaching

ROOT = Path(__file__).resolve().parent.parent
MODES = {"lockstep": ["env.stepping=lockstep"], "async": ["env.stepping=async"]}


def train(kvrl, mode, seed, args, scratch):
    run_dir = Path(scratch) / f"{mode}_seed{seed}"
    command = [str(ROOT / "launch" / "kvrl-mpirun"), "-np", "3", kvrl, "train",
               str(ROOT / "configs" / "cartpole_ppo.yaml"), f"run.dir={run_dir}", f"run.seed={seed}",
               f"run.total_env_steps={args.steps}", f"env.num_envs={args.envs}",
               f"env.step_threads={args.envs}", f"env.step_delay_ms={args.delay_ms}",
               f"env.step_delay_spread={args.spread}", f"env.min_ready={args.min_ready}", *MODES[mode]]
    begin = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        raise RuntimeError(f"{mode} seed {seed} failed ({result.returncode}): {result.stderr[-2000:]}")
    learner = json.loads((run_dir / "rank0.json").read_text())
    actors = [json.loads((run_dir / f"rank{r}.json").read_text()) for r in (1, 2)]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_to_400, _ = first_reaching(metrics, 400)
    policy_steps = sum(a["policy_steps"] for a in actors)
    return {"mode": mode, "seed": seed, "env_steps": learner["env_steps"],
            "learner_wall_s": learner["wall_seconds"],
            "env_steps_per_s": learner["env_steps"] / learner["wall_seconds"],
            "mean_return": learner["mean_return"], "steps_to_400": steps_to_400,
            "policy_steps": policy_steps, "partial_policy_steps": sum(a["partial_policy_steps"] for a in actors),
            "streams_per_policy_step": sum(a["env_steps"] for a in actors) / max(policy_steps, 1),
            "wall_s": time.perf_counter() - begin}


def show(row, lockstep_rate):
    ratio = row["env_steps_per_s"] / lockstep_rate if lockstep_rate else float("nan")
    to_400 = "-" if row["steps_to_400"] is None else f"{row['steps_to_400']:,}"
    print(f"| {row['mode']} | {row['seed']} | {row['env_steps_per_s']:.0f} | {ratio:.2f}x | "
          f"{row['streams_per_policy_step']:.1f} | {row['mean_return']:.1f} | {to_400} | "
          f"{row['learner_wall_s']:.0f} s |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvrl", default=str(ROOT / "build" / "launch" / "kvrl"))
    parser.add_argument("--seeds", type=int, nargs="*", default=[1])
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--envs", type=int, default=8, help="environments per actor")
    parser.add_argument("--delay-ms", type=float, default=2.0, help="the fastest environment's step delay")
    parser.add_argument("--spread", type=float, default=4.0, help="the slowest environment's delay / the fastest's")
    parser.add_argument("--min-ready", type=int, default=1)
    parser.add_argument("--out", help="write the rows as JSON here")
    args = parser.parse_args()
    print(f"CartPole-v1, {args.envs} envs per actor, step delays {args.delay_ms:g} to "
          f"{args.delay_ms * args.spread:g} ms, {args.steps:,} env steps")
    print("| mode | seed | env steps/s | vs lockstep | streams per policy step | final return | "
          "env steps to 400 | learner wall |")
    print("|---|---|---|---|---|---|---|---|")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for seed in args.seeds:
            lockstep = train(args.kvrl, "lockstep", seed, args, scratch)
            show(lockstep, lockstep["env_steps_per_s"])
            asynchronous = train(args.kvrl, "async", seed, args, scratch)
            asynchronous["vs_lockstep"] = asynchronous["env_steps_per_s"] / lockstep["env_steps_per_s"]
            show(asynchronous, lockstep["env_steps_per_s"])
            rows += [lockstep, asynchronous]
            if args.out:
                Path(args.out).write_text(json.dumps({"settings": vars(args), "runs": rows}, indent=1) + "\n")
    ratios = [r["vs_lockstep"] for r in rows if r["mode"] == "async"]
    print(f"async / lockstep env steps/s: {', '.join(f'{r:.2f}x' for r in ratios)} (target >= 1.5x)")


if __name__ == "__main__":
    main()
