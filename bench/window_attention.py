"""Benchmark: the learner's window forward+backward on packings drawn as in training, kvrl
with attention that follows the episodes (common/model/window_attention.h) against kvrl's
whole-window call and TorchRL's reference module, side by side, one thread each.

    python bench/window_attention.py --kvrl-bench build/bench/kvrl_bench_window_attention \
        --out bench/results/window_attention.json --profile /tmp/window_attention_traces

Packings (episodes of L steps take L + 1 tokens, the final observation's; first-fit
longest first into rows of T tokens, as the learner packs them):
  cartpole early   CartPole-v1 episodes of a uniformly random policy (gymnasium, seeded)
  cartpole middle  lengths uniform in [50, 350], as around a mean return of 200
  cartpole late    500-step episodes (truncated), one per row
  repeat previous  POPGym RepeatPrevious easy: 52 cards, one episode per row
Rows are cut to the fullest one's tokens, as the learner cuts its minibatches.
CartPole cells use the main config's model (hidden 64, 2 layers, 4 heads, T 512, 4 rows);
RepeatPrevious its config's (hidden 32, 1 layer, 2 heads, T 64, 8 rows).
"path": contexts (each context gathered into its own row, the fused causal kernel), or
causal where every row holds one context; "scored": the query-key pairs the kernel covers
over B * T * T.
Targets: kvrl >= 2x the reference where the mean episode is under T/4, and never
slower than kvrl's whole-window call at one episode per row. Exit status 0 either way.
"""
import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import tempfile
import time

import torch
import trace_top_ops
from tensordict import TensorDict
from torchrl.modules import TransformerModule, set_recurrent_mode

CARTPOLE_MODEL = dict(hidden=64, layers=2, heads=4, input=4, max_seq_len=512, rows=4)
REPEAT_PREVIOUS_MODEL = dict(hidden=32, layers=1, heads=2, input=4, max_seq_len=64, rows=8)


def random_policy_cartpole_lengths(count, seed):
    import gymnasium as gym
    env = gym.make("CartPole-v1")
    rng = random.Random(seed)
    lengths = []
    for episode in range(count):
        env.reset(seed=seed + episode)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(rng.randrange(2))
            steps, done = steps + 1, terminated or truncated
        lengths.append(steps)
    return lengths


def packing_lengths(name, seed):
    rng = random.Random(seed)
    if name == "cartpole early":
        return random_policy_cartpole_lengths(400, seed)
    if name == "cartpole middle":
        return [rng.randint(50, 350) for _ in range(60)]
    if name == "cartpole late":
        return [500] * 16
    return [52] * 32  # repeat previous


def pack(lengths, width, rows):
    """First-fit, longest first, episode tokens = steps + 1; the first `rows` rows."""
    packed = []
    for tokens in sorted((length + 1 for length in lengths), reverse=True):
        for row in packed:
            if sum(row) + tokens <= width:
                row.append(tokens)
                break
        else:
            packed.append([tokens])
    if len(packed) < rows:
        raise RuntimeError(f"only {len(packed)} rows packed, {rows} wanted")
    # The fullest rows first-fit makes hold the long episodes; take rows across the packing.
    stride = len(packed) / rows
    return [packed[int(i * stride)] for i in range(rows)]


def is_init_of(rows):
    """[rows, width]: the fullest row's width, as the learner cuts its minibatch rows."""
    is_init = torch.ones(len(rows), max(sum(row) for row in rows), dtype=torch.bool)
    for r, row in enumerate(rows):
        column = 0
        for tokens in row:
            is_init[r, column + 1:column + tokens] = False
            column += tokens
    return is_init


def reference_seconds(model, is_init, repeats):
    torch.manual_seed(0)
    module = TransformerModule(input_size=model["input"], hidden_size=model["hidden"], num_layers=model["layers"],
                               num_heads=model["heads"], max_seq_len=model["max_seq_len"], in_key="observation",
                               out_key="embed")
    batch, width = is_init.shape
    td = TensorDict({"observation": torch.randn(batch, width, model["input"]), "is_init": is_init.unsqueeze(-1)},
                    [batch, width])
    seconds = []
    for r in range(repeats + 1):
        module.zero_grad()
        begin = time.perf_counter()
        with set_recurrent_mode(True):
            loss = module(td.clone())["embed"].sum()
        loss.backward()
        if r > 0:
            seconds.append(time.perf_counter() - begin)
    return statistics.median(seconds)


def kvrl_seconds(binary, model, rows, repeats, trace_prefix=None):
    with tempfile.NamedTemporaryFile("w", suffix=".rows", delete=False) as f:
        f.write("\n".join(" ".join(map(str, row)) for row in rows) + "\n")
    try:
        command = [binary, f.name, str(repeats)] + [str(model[k]) for k in
                                                    ("hidden", "layers", "heads", "input", "max_seq_len")]
        command += [trace_prefix] if trace_prefix else []
        out = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} exited {out.returncode}: {out.stderr.strip()}")
        return json.loads(out.stdout)
    finally:
        os.unlink(f.name)


def cell(args, name, seed):
    model = REPEAT_PREVIOUS_MODEL if name == "repeat previous" else CARTPOLE_MODEL
    # RepeatPrevious cells take about 2 ms, where one scheduler hiccup is 10%: more repeats.
    repeats = args.repeats * (8 if name == "repeat previous" else 1)
    width = model["max_seq_len"]
    rows = pack(packing_lengths(name, seed), width, model["rows"])
    episodes = [tokens - 1 for row in rows for tokens in row]
    # Rounds of kvrl's process and the reference, alternating which goes first, so that both
    # see the same stretches of this shared machine's load; medians over the rounds.
    kvrl_rounds, reference_rounds = [], []
    for round_index in range(args.rounds):
        if (seed + round_index) % 2 == 0:
            kvrl_rounds.append(kvrl_seconds(args.kvrl_bench, model, rows, repeats))
            reference_rounds.append(reference_seconds(model, is_init_of(rows), repeats))
        else:
            reference_rounds.append(reference_seconds(model, is_init_of(rows), repeats))
            kvrl_rounds.append(kvrl_seconds(args.kvrl_bench, model, rows, repeats))
    kvrl = dict(kvrl_rounds[0], kvrl_s=statistics.median(r["kvrl_s"] for r in kvrl_rounds),
                whole_s=statistics.median(r["whole_s"] for r in kvrl_rounds))
    reference = statistics.median(reference_rounds)
    mean_episode = statistics.mean(episodes)
    return dict(packing=name, seed=seed, window=kvrl["width"], rows=len(rows), episodes=len(episodes),
                mean_episode=mean_episode, episodes_per_row=len(episodes) / len(rows),
                path=kvrl["path"], scored_fraction=kvrl["scored_fraction"], groups=kvrl["groups"],
                kvrl_ms=kvrl["kvrl_s"] * 1e3, whole_ms=kvrl["whole_s"] * 1e3, reference_ms=reference * 1e3,
                kvrl_vs_reference=reference / kvrl["kvrl_s"], kvrl_vs_whole=kvrl["whole_s"] / kvrl["kvrl_s"],
                whole_vs_reference=reference / kvrl["whole_s"])


def profile(args):
    """Top ops by self time of one forward+backward on the first early-CartPole packing,
    kvrl's path (after) and one whole-window call (before)."""
    prefix = os.path.join(args.profile, "cartpole_early")
    os.makedirs(args.profile, exist_ok=True)
    rows = pack(packing_lengths("cartpole early", 0), CARTPOLE_MODEL["max_seq_len"], CARTPOLE_MODEL["rows"])
    kvrl_seconds(args.kvrl_bench, CARTPOLE_MODEL, rows, 1, prefix)
    out = {}
    for path in ("whole", "kvrl"):
        total, ranked = trace_top_ops.top_ops(f"{prefix}-{path}.trace", 10)
        out[path] = dict(total_ms=total / 1e3, top=ranked)
        print(f"profile, cartpole early, {path}: {total / 1e3:.2f} ms of ops")
        for row in ranked:
            print(f"  {row['op']:<58} {row['self_ms']:>7.2f} ms {100 * row['share']:>5.1f}% {row['calls']:>4} calls")
    return out


def verdicts(row):
    out = []
    if row["mean_episode"] < row["window"] / 4:
        out.append(("kvrl/reference >= 2x", row["kvrl_vs_reference"] >= 2.0))
    if row["episodes_per_row"] <= 1.0:
        out.append(("not slower than whole", row["kvrl_vs_whole"] >= 1.0))
    return out


HEADER = (f"{'packing':<16} {'seed':>4} {'mean ep':>8} {'ep/row':>7} {'path':>8} {'scored':>7} {'kvrl ms':>9} "
          f"{'whole ms':>9} {'ref ms':>9} {'kvrl/ref':>10} {'kvrl/whole':>12}  target")


def print_row(row):
    targets = ", ".join(f"{name} {'met' if ok else 'MISSED'}" for name, ok in verdicts(row))
    print(f"{row['packing']:<16} {row['seed']:>4} {row['mean_episode']:>8.1f} {row['episodes_per_row']:>7.1f} "
          f"{row['path']:>8} {row['scored_fraction']:>7.3f} {row['kvrl_ms']:>9.2f} {row['whole_ms']:>9.2f} {row['reference_ms']:>9.2f} "
          f"{row['kvrl_vs_reference']:>9.2f}x {row['kvrl_vs_whole']:>11.2f}x  {targets}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvrl-bench", required=True, help="path to kvrl_bench_window_attention")
    parser.add_argument("--out", default="bench/results/window_attention.json")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="alternating kvrl/reference rounds per cell")
    parser.add_argument("--profile", metavar="DIR", help="also write LibTorch profiler traces here and print top ops")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(HEADER)
    print("-" * len(HEADER))
    rows = []
    for name in ("cartpole early", "cartpole middle", "cartpole late", "repeat previous"):
        for seed in range(args.seeds):
            rows.append(cell(args, name, seed))
            print_row(rows[-1])
    checks = [ok for row in rows for _, ok in verdicts(row)]
    print(f"targets: {sum(checks)} met, {len(checks) - sum(checks)} missed")
    profiles = profile(args) if args.profile else None
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(dict(machine=platform.node(), processor=platform.processor(), torch=torch.__version__,
                       threads=1, repeats=args.repeats, rounds=args.rounds, rows=rows, profile=profiles), f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
