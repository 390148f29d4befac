"""Benchmark: kvrl's C++ TransformerModule against TorchRL's reference, side by side.

Runs each grid cell for the C++ module (bench/transformer_bench.cpp, one process per
cell) and for the reference module in this process, with the same protocol, one thread
each, alternating which goes first. Prints a table with C++/reference throughput
ratios and writes JSON.

    python bench/transformer_bench.py --kvrl-bench build/bench/kvrl_bench_transformer \
        --out bench/results/transformer_bench.json

Model: hidden 256, 4 layers, 8 heads, input 16, max_seq_len 256.
Cached step: envs {1, 8, 32} x context {64, 256}; "context" is the number of steps
already in every stream's cache, and the 16 steps ending there are timed.
Window forward+backward: batch {8, 32} x window {32, 128}, episodes starting at 0 and T/2.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import time

import torch
from tensordict import TensorDict
from torchrl.modules import TransformerModule, set_recurrent_mode

INPUT_SIZE, MAX_SEQ_LEN, TIMED_STEPS = 16, 256, 16
STEP_GRID = [(envs, context) for envs in (1, 8, 32) for context in (64, 256)]
WINDOW_GRID = [(batch, window) for batch in (8, 32) for window in (32, 128)]


def make_reference():
    return TransformerModule(input_size=INPUT_SIZE, hidden_size=256, num_layers=4, num_heads=8,
                             max_seq_len=MAX_SEQ_LEN, in_key="observation", out_key="embed")


def reference_step_seconds(envs, context, repeats):
    module = make_reference().eval()
    obs = torch.randn(envs, INPUT_SIZE)
    start = torch.ones(envs, 1, dtype=torch.bool)
    cont = torch.zeros(envs, 1, dtype=torch.bool)

    def step(is_init):
        module(TensorDict({"observation": obs, "is_init": is_init}, [envs]))

    per_step = []
    with torch.no_grad():
        for r in range(repeats + 1):
            step(start)
            for _ in range(1, context - TIMED_STEPS):
                step(cont)
            begin = time.perf_counter()
            for _ in range(TIMED_STEPS):
                step(cont)
            if r > 0:
                per_step.append((time.perf_counter() - begin) / TIMED_STEPS)
    return statistics.median(per_step)


def reference_window_seconds(batch, window, repeats):
    module = make_reference()
    is_init = torch.zeros(batch, window, 1, dtype=torch.bool)
    is_init[:, 0] = True
    is_init[:, window // 2] = True
    td = TensorDict({"observation": torch.randn(batch, window, INPUT_SIZE), "is_init": is_init},
                    [batch, window])
    seconds = []
    for r in range(repeats + 1):
        module.zero_grad()
        begin = time.perf_counter()
        with set_recurrent_mode(True):
            module(td.clone())["embed"].sum().backward()
        if r > 0:
            seconds.append(time.perf_counter() - begin)
    return statistics.median(seconds)


def cpp_seconds(binary, mode, a, b, repeats):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run([binary, mode, str(a), str(b), str(repeats)], capture_output=True, text=True,
                         check=True, env=env)
    return json.loads(out.stdout)["seconds"]


def measure(binary, mode, a, b, repeats, first_cpp):
    reference = reference_step_seconds if mode == "step" else reference_window_seconds
    if first_cpp:
        cpp = cpp_seconds(binary, mode, a, b, repeats)
        ref = reference(a, b, repeats)
    else:
        ref = reference(a, b, repeats)
        cpp = cpp_seconds(binary, mode, a, b, repeats)
    return cpp, ref


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvrl-bench", required=True, help="path to kvrl_bench_transformer")
    parser.add_argument("--out", default="bench/results/transformer_bench.json")
    parser.add_argument("--step-repeats", type=int, default=5)
    parser.add_argument("--window-repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)

    rows = []
    for index, (envs, context) in enumerate(STEP_GRID):
        cpp, ref = measure(args.kvrl_bench, "step", envs, context, args.step_repeats, index % 2 == 0)
        rows.append(dict(path="cached step", shape=f"envs={envs} context={context}", envs=envs,
                         context=context, cpp_us=cpp * 1e6, reference_us=ref * 1e6,
                         cpp_env_steps_per_s=envs / cpp, reference_env_steps_per_s=envs / ref,
                         throughput_ratio=ref / cpp))
    for index, (batch, window) in enumerate(WINDOW_GRID):
        cpp, ref = measure(args.kvrl_bench, "window", batch, window, args.window_repeats, index % 2 == 0)
        rows.append(dict(path="window fwd+bwd", shape=f"batch={batch} window={window}", batch=batch,
                         window=window, cpp_us=cpp * 1e6, reference_us=ref * 1e6,
                         cpp_tokens_per_s=batch * window / cpp,
                         reference_tokens_per_s=batch * window / ref, throughput_ratio=ref / cpp))

    header = f"{'path':<15} {'shape':<22} {'C++ (us)':>12} {'reference (us)':>15} {'C++/ref throughput':>19}"
    print(header)
    print("-" * len(header))
    for row in rows:
        print(f"{row['path']:<15} {row['shape']:<22} {row['cpp_us']:>12.1f} {row['reference_us']:>15.1f} "
              f"{row['throughput_ratio']:>18.2f}x")
    steps = {(r["envs"], r["context"]): r["cpp_us"] for r in rows if r["path"] == "cached step"}
    for envs in (1, 8, 32):
        print(f"C++ step cost, context 64 / context 256 at envs={envs}: "
              f"{steps[(envs, 64)] / steps[(envs, 256)]:.2f}")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(dict(torch=torch.__version__, machine=platform.processor() or platform.machine(),
                       threads=1, model=dict(hidden_size=256, num_layers=4, num_heads=8,
                                             input_size=INPUT_SIZE, max_seq_len=MAX_SEQ_LEN),
                       rows=rows), f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
