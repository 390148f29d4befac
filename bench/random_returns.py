"""The mean return of a uniformly random policy on a Gymnasium environment, the baseline the
image tasks' targets in bench/learning_runs.py are set against (docs/training.md).

    python bench/random_returns.py MinAtar/Breakout-v1 --setup minatar.gym:register_envs --episodes 1000
"""
import argparse
import importlib

import gymnasium as gym
import numpy as np


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env_id")
    parser.add_argument("--setup", help="module:function to call first (as env.gym_setup)")
    parser.add_argument("--episodes", type=int, default=1000)
    args = parser.parse_args()
    if args.setup:
        module, function = args.setup.split(":")
        getattr(importlib.import_module(module), function)()
    env = gym.make(args.env_id)
    rng = np.random.default_rng(0)
    returns = []
    for episode in range(args.episodes):
        env.reset(seed=episode)
        total, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    print(f"{args.env_id}: random policy mean return {np.mean(returns):.3f} "
          f"(std {np.std(returns):.3f}) over {args.episodes} episodes")


if __name__ == "__main__":
    main()
