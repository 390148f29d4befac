"""Environment steps per second: kvrl's native VectorEnv against Gymnasium's SyncVectorEnv
on the same task, both stepping 16 environments with uniform random actions and
automatic resets, single-threaded, no policy; and the Gymnasium bridge (gym:<id>, the
Python environments stepped from kvrl's process) against Gymnasium's own vector loop.
Rounds alternate kvrl and Gymnasium so both see the same machine load; the ratio is per
round, and the table gives the median.

For the native environments a second comparison uses every core the machine has
(`--threads`, default the CPU count): kvrl's vector env stepping on that many threads
(`env.step_threads`, lockstep) against Gymnasium's `AsyncVectorEnv` (a process per
environment, shared memory) and against the single-threaded `SyncVectorEnv` above. The
targets are judged on the single-threaded, like-for-like ratio.

    python bench/env_throughput.py --out bench/results/env_throughput.json
    python bench/env_throughput.py --envs-list Hopper-v5 --rounds 5

Targets (issue #20): >= 3x on Hopper and HalfCheetah, >= 1.5x on Walker2d and Ant, where
MuJoCo's own physics, the same library on both sides, dominates; >= 0.9x for the bridge
(it adds no overhead worth naming).
"""
import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {"Hopper-v5": 3.0, "HalfCheetah-v5": 3.0, "Walker2d-v5": 1.5, "Ant-v5": 1.5,
           "gym:CartPole-v1": 0.9, "gym:Hopper-v5": 0.9}


def kvrl_steps_per_s(binary, name, envs, steps, seed, threads=0):
    result = subprocess.run([binary, "--env", name, "--envs", str(envs), "--steps", str(steps), "--seed", str(seed),
                             "--threads", str(threads)],
                            capture_output=True, text=True, check=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    return json.loads(result.stdout)["steps_per_s"]


def gymnasium_steps_per_s(name, envs, steps, seed, processes=False):
    name = name.removeprefix("gym:")  # the bridge's reference: the same environments, stepped from Python
    vector_class = gym.vector.AsyncVectorEnv if processes else gym.vector.SyncVectorEnv
    vector = vector_class([lambda: gym.make(name) for _ in range(envs)],
                          autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    vector.reset(seed=seed)
    space = vector.action_space
    rng = np.random.default_rng(seed)
    vector_steps = steps // envs
    if isinstance(space, gym.spaces.MultiDiscrete):
        actions = rng.integers(0, space.nvec, size=(vector_steps, *space.shape))
    else:
        actions = rng.uniform(space.low, space.high, size=(vector_steps, *space.shape)).astype(space.dtype)
    start = time.perf_counter()
    for t in range(vector_steps):
        vector.step(actions[t])
    seconds = time.perf_counter() - start
    vector.close()
    return vector_steps * envs / seconds


def physics_steps_per_s(name, steps, seed):
    """MuJoCo's physics for one environment step (mj_step x frame skip), called from Python:
    the physics plus one binding call, no environment logic. The same uniform actions; reset
    where Gymnasium's environment would end its episode. When kvrl's whole step is faster
    than this, what remains of its time is MuJoCo's own."""
    env = gym.make(name)
    env.reset(seed=seed)
    model, data, frame_skip = env.unwrapped.model, env.unwrapped.data, env.unwrapped.frame_skip
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, size=(steps, model.nu))
    done = np.zeros(steps, dtype=bool)
    for t in range(steps):  # where episodes end, from the environment itself
        _, _, terminated, truncated, _ = env.step(actions[t].astype(np.float32))
        done[t] = terminated or truncated
        if done[t]:
            env.reset()
    mujoco = __import__("mujoco")
    mujoco.mj_resetData(model, data)
    start = time.perf_counter()
    for t in range(steps):
        data.ctrl[:] = actions[t]
        mujoco.mj_step(model, data, nstep=frame_skip)
        if done[t]:
            mujoco.mj_resetData(model, data)
    return steps / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kvrl-bench", default=str(ROOT / "build/bench/kvrl_bench_envs"))
    parser.add_argument("--envs-list", nargs="+", default=list(TARGETS))
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count(),
                        help="kvrl's stepping threads in the all-cores comparison (0: skip it)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()

    rows = []
    for name in args.envs_list:
        rounds = []
        for round_index in range(args.rounds):
            ours = kvrl_steps_per_s(args.kvrl_bench, name, args.envs, args.steps, round_index)
            theirs = gymnasium_steps_per_s(name, args.envs, args.steps, round_index)
            row = {"kvrl": ours, "gymnasium": theirs, "ratio": ours / theirs}
            if args.threads > 0 and not name.startswith("gym:"):
                threaded = kvrl_steps_per_s(args.kvrl_bench, name, args.envs, args.steps, round_index, args.threads)
                processes = gymnasium_steps_per_s(name, args.envs, args.steps, round_index, processes=True)
                row.update({"kvrl_threaded": threaded, "gymnasium_async": processes,
                            "threaded_ratio": threaded / theirs, "threaded_to_async": threaded / processes})
            rounds.append(row)
        ratio = statistics.median(r["ratio"] for r in rounds)
        physics = None if name.startswith("gym:") else physics_steps_per_s(name, args.steps // 4, 0)
        rows.append({"env": name, "envs": args.envs, "env_steps": args.steps, "rounds": rounds,
                     "physics_steps_per_s": physics,
                     "kvrl_steps_per_s": statistics.median(r["kvrl"] for r in rounds),
                     "gymnasium_steps_per_s": statistics.median(r["gymnasium"] for r in rounds),
                     "ratio": ratio, "target": TARGETS.get(name), "met": ratio >= TARGETS.get(name, 0)})
        if "kvrl_threaded" in rounds[0]:
            rows[-1].update({key: statistics.median(r[key] for r in rounds) for key in
                             ("kvrl_threaded", "gymnasium_async", "threaded_ratio", "threaded_to_async")})

    print(f"{'env':16} {'kvrl steps/s':>13} {'Gymnasium':>11} {'ratio':>7} {'target':>7} "
          f"{'mj_step from Python':>20}  rounds")
    for row in rows:
        spread = ", ".join(f"{r['ratio']:.2f}" for r in row["rounds"])
        target = f">={row['target']:.1f}" if row["target"] else "-"
        physics = f"{row['physics_steps_per_s']:.0f}" if row["physics_steps_per_s"] else "-"
        print(f"{row['env']:16} {row['kvrl_steps_per_s']:13.0f} {row['gymnasium_steps_per_s']:11.0f} "
              f"{row['ratio']:6.2f}x {target:>7} {physics:>20}  {spread}")
    threaded_rows = [row for row in rows if "kvrl_threaded" in row]
    if threaded_rows:
        print(f"\nall {args.threads} cores: kvrl on {args.threads} threads against Gymnasium's AsyncVectorEnv "
              f"(and its SyncVectorEnv)")
        print(f"{'env':16} {'kvrl steps/s':>13} {'Async':>9} {'kvrl/Async':>11} {'kvrl/Sync':>10}")
        for row in threaded_rows:
            print(f"{row['env']:16} {row['kvrl_threaded']:13.0f} {row['gymnasium_async']:9.0f} "
                  f"{row['threaded_to_async']:10.2f}x {row['threaded_ratio']:9.2f}x")
    if args.out:
        report = {"benchmark": "env_throughput", "gymnasium": gym.__version__, "rows": rows,
                  "command": "python bench/env_throughput.py " + " ".join(
                      f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items() if k in ("envs", "steps", "rounds", "threads"))}
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
