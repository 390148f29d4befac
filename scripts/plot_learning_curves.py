"""Plots mean episode return against env steps from kvrl runs' metrics.csv files.

    python scripts/plot_learning_curves.py OUT.png "label=RUN_DIR" ["label=RUN_DIR" ...] [--title T]
"""
import argparse
import csv

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_curve(run_dir):
    steps, returns = [], []
    with open(f"{run_dir}/metrics.csv") as f:
        for row in csv.DictReader(f):
            steps.append(int(row["env_steps"]))
            returns.append(float(row["mean_return"]))
    return steps, returns


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("runs", nargs="+", help="label=run_dir (split at the last =)")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    figure, axes = plt.subplots(figsize=(6, 3.6), dpi=120)
    for item in args.runs:
        label, _, run_dir = item.rpartition("=")  # labels may hold "=", paths do not
        steps, returns = read_curve(run_dir)
        axes.plot(steps, returns, label=label)
    axes.set_xlabel("env steps")
    axes.set_ylabel("mean return (last 100 episodes)")
    axes.set_title(args.title)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
