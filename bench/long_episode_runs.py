"""Learning runs on episodes longer than the context (issue #19), and what a weight update
does to a live context: restart, reprefill or keep (actor.on_weight_update).

Each run is `kvrl train` under launch/kvrl-mpirun with 1 learner + 2 actors. Reported per
run: the mean return of the last 100 episodes at the end, the env steps and wall time
until that mean first reached the task's target (from RUN_DIR/metrics.jsonl; "-" when it
never did), and the acting policy's KL from the learner's policy per token, KL(mu || pi)
estimated from the taken actions at each batch's start (the mean over updates, and over
the last quarter of them), with the largest same-version log-prob error the learner saw.

    python bench/long_episode_runs.py --kvrl build/launch/kvrl --out bench/results/long_episode_runs.json
    python bench/long_episode_runs.py --only cartpole_sliding/restart   # one run
    python bench/long_episode_runs.py --from-runs DIR --seeds 1 2 3     # the table again, from --keep-runs DIR

It also reports the learner's mean packing efficiency (trained steps per computed token)
and what the fragments' context prefixes cost on the wire: prefix steps per message and
bytes per env step with and without them (the actors' counters, the wire format's sizes).

Runs are not bit-reproducible (which episodes land in which batch depends on timing), and
this machine is shared: wall times are comparable within one invocation only.
"""
import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name: (config, overrides, target mean return)
RUNS = {
    "cartpole_segment/restart": ("cartpole_segment_ppo.yaml", ["actor.on_weight_update=restart"], 475),
    "cartpole_segment/reprefill": ("cartpole_segment_ppo.yaml", ["actor.on_weight_update=reprefill"], 475),
    "cartpole_segment/keep": ("cartpole_segment_ppo.yaml", ["actor.on_weight_update=keep"], 475),
    "cartpole_sliding/restart": ("cartpole_sliding_ppo.yaml", ["actor.on_weight_update=restart"], 475),
    "repeat_previous_sliding/restart": ("repeat_previous_sliding_ppo.yaml", ["actor.on_weight_update=restart"], 0.75),
    "repeat_previous_sliding/reprefill": ("repeat_previous_sliding_ppo.yaml", ["actor.on_weight_update=reprefill"],
                                          0.75),
    "repeat_previous_sliding/keep": ("repeat_previous_sliding_ppo.yaml", ["actor.on_weight_update=keep"], 0.75),
    "repeat_previous_sliding/no_context": ("repeat_previous_sliding_ppo.yaml", ["model.temporal_context=false"], 0.75),
    # A memory task with short episodes (whole, in context): the policies' effect on memory.
    "tmaze/restart": ("tmaze_ppo.yaml", ["actor.on_weight_update=restart"], 0.75),
    "tmaze/reprefill": ("tmaze_ppo.yaml", ["actor.on_weight_update=reprefill"], 0.75),
    "tmaze/keep": ("tmaze_ppo.yaml", ["actor.on_weight_update=keep"], 0.75),
    # Today's one-deck run, its whole 51-step episode in context: the return to match.
    "repeat_previous_one_deck/whole_context": ("repeat_previous_ppo.yaml", [], 0.75),
}


def first_reaching(metrics, target):
    for row in metrics:
        if row["episode/return_mean"] >= target:
            return row["env_steps"], row["wall_seconds"]
    return None, None


# Bytes of an episode message (docs/wire_format.md) for 4-float observations and one action:
# header, field table and checksum, and the final observation; each step; each prefix step.
MESSAGE_BYTES, STEP_BYTES, PREFIX_STEP_BYTES = 56 + 16 * 11 + 4 + 16, 16 + 4 + 4 + 3 + 4 + 4 + 8, 16


def summarize(run_dir, name, seed, target):
    """A finished run's row, from its rank<N>.json and metrics.jsonl."""
    ranks = [json.loads(path.read_text()) for path in sorted(run_dir.glob("rank*.json"))]
    learner = next(r for r in ranks if r.get("role") == "learner")
    actors = [r for r in ranks if r.get("role") == "actor"]
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_to_target, wall_to_target = first_reaching(metrics, target)
    kls = [m["acting/kl"] for m in metrics]
    late = kls[len(kls) * 3 // 4:] or kls
    env_steps = sum(a["env_steps"] for a in actors)
    messages = sum(a["episodes_sent"] for a in actors)
    prefix_steps = sum(a.get("context_prefix_steps", 0) for a in actors)
    payload = env_steps * STEP_BYTES + messages * MESSAGE_BYTES
    return {"name": name, "seed": seed, "target": target,
            "mean_return": learner["mean_return"], "env_steps": learner["env_steps"],
            "steps_to_target": steps_to_target, "wall_to_target_s": wall_to_target,
            "learner_wall_s": learner["wall_seconds"],
            "acting_kl_mean": sum(kls) / len(kls), "acting_kl_late": sum(late) / len(late),
            "same_version_steps": sum(m["acting/same_version_steps"] for m in metrics),
            "same_version_max_log_prob_error": max(m["acting/same_version_max_log_prob_error"] for m in metrics),
            "packing_efficiency_mean": sum(m["learner/packing_efficiency"] for m in metrics) / len(metrics),
            "prefix_steps_per_message": prefix_steps / messages,
            "bytes_per_env_step": (payload + prefix_steps * PREFIX_STEP_BYTES) / env_steps,
            "bytes_per_env_step_without_prefix": payload / env_steps,
            "run_dir": str(run_dir)}


def run(kvrl, name, seed, keep_dir):
    config, overrides, target = RUNS[name]
    run_dir = Path(keep_dir) / name.replace("/", "_") / f"seed{seed}"
    command = [str(ROOT / "launch" / "kvrl-mpirun"), "-np", "3", kvrl, "train", str(ROOT / "configs" / config),
               f"run.dir={run_dir}", f"run.seed={seed}", *overrides]
    begin = time.perf_counter()
    result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - begin
    if result.returncode != 0:
        raise RuntimeError(f"{name} failed ({result.returncode}): {result.stderr[-2000:]}")
    row = summarize(run_dir, name, seed, target)
    row.update({"config": config, "overrides": overrides, "wall_s": wall})
    return row


def show(row):
    to_target = "-" if row["steps_to_target"] is None else f"{row['steps_to_target']:,}"
    wall_target = "-" if row["wall_to_target_s"] is None else f"{row['wall_to_target_s']:.0f} s"
    print(f"| {row['name']} | {row['seed']} | {row['mean_return']:.3f} | {to_target} | {wall_target} | "
          f"{row['learner_wall_s']:.0f} s | {row['acting_kl_mean']:.4f} | {row['acting_kl_late']:.4f} | "
          f"{row['same_version_max_log_prob_error']:.1e} | {row['packing_efficiency_mean']:.2f} | "
          f"{row['prefix_steps_per_message']:.1f} | {row['bytes_per_env_step']:.1f} | "
          f"{row['bytes_per_env_step_without_prefix']:.1f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvrl", default=str(ROOT / "build" / "launch" / "kvrl"))
    parser.add_argument("--only", nargs="*", choices=sorted(RUNS), help="these runs only (default: all)")
    parser.add_argument("--seeds", type=int, nargs="*", default=[1])
    parser.add_argument("--keep-runs", help="keep the run directories here (default: a temporary folder)")
    parser.add_argument("--out", help="write the rows as JSON here")
    parser.add_argument("--from-runs", help="train nothing: summarize the runs kept earlier with --keep-runs DIR")
    args = parser.parse_args()
    names = args.only or list(RUNS)
    if args.from_runs:
        for seed in args.seeds:
            for name in names:
                run_dir = Path(args.from_runs) / name.replace("/", "_") / f"seed{seed}"
                if (run_dir / "metrics.jsonl").exists():
                    show(summarize(run_dir, name, seed, RUNS[name][2]))
        return
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        keep = args.keep_runs or scratch
        print("| run | seed | final return | env steps to target | wall to target | wall | KL(mu||pi) mean | "
              "KL last quarter | same-version max log-prob error | packing efficiency | prefix steps per "
              "message | bytes per env step | without the prefix |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for seed in args.seeds:
            for name in names:
                rows.append(run(args.kvrl, name, seed, keep))
                show(rows[-1])
                if args.out:
                    Path(args.out).write_text(json.dumps({"runs": rows}, indent=1))


if __name__ == "__main__":
    main()
