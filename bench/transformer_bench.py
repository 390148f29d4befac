"""Benchmark: kvrl's C++ TransformerModule against TorchRL's reference, side by side.

Runs each grid cell for the C++ module (bench/transformer_bench.cpp, one process per
cell) and for the reference module in this process, with the same protocol, one thread
each, alternating which goes first. Prints a table with C++/reference throughput
ratios, each against its target where the grid has one, and writes JSON.

    python bench/transformer_bench.py --kvrl-bench build/bench/kvrl_bench_transformer \
        --out bench/results/transformer_bench.json
    python bench/transformer_bench.py --kvrl-bench ... --grid device --device cuda   # on a GPU

Model: hidden 256, 4 layers, 8 heads, input 16; "context" is the number of steps already
in every stream's cache, and the 16 steps ending there are timed.
Grids:
  cpu (default): max_seq_len 256; cached step envs {1, 8, 32} x context {64, 256}; window
      forward+backward batch {8, 32} x window {32, 128}, float32.
  device: max_seq_len 1024; cached step envs {1, 8, 64, 256} x context {64, 256, 1024}
      (kvrl replays a CUDA graph on CUDA), target >= 5x at envs <= 8; window batch
      {8, 32} x window {128, 512} in float32 and bfloat16, target >= 1.0x.
  rehearsal: the device grid's protocol at sizes a CPU runs in seconds (targets shown,
      not expected to be met on a CPU).
The exit status is 0 whether or not targets are met; a failed measurement raises.
"""
import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import time

import torch
from tensordict import TensorDict
from torchrl.modules import TransformerModule, set_recurrent_mode

INPUT_SIZE, TIMED_STEPS = 16, 16
GRIDS = {
    "cpu": dict(max_seq_len=256, steps=[(e, c) for e in (1, 8, 32) for c in (64, 256)],
                windows=[(b, w, "float32") for b in (8, 32) for w in (32, 128)],
                step_target=None, window_target=None),
    "device": dict(max_seq_len=1024, steps=[(e, c) for e in (1, 8, 64, 256) for c in (64, 256, 1024)],
                   windows=[(b, w, d) for d in ("float32", "bfloat16") for b in (8, 32) for w in (128, 512)],
                   step_target=(8, 5.0), window_target=1.0),
    "rehearsal": dict(max_seq_len=128, steps=[(1, 64), (8, 64)],
                      windows=[(8, 64, "float32"), (8, 64, "bfloat16")],
                      step_target=(8, 5.0), window_target=1.0),
}


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def autocast(device, dtype):
    if dtype == "bfloat16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def make_reference(max_seq_len, device):
    return TransformerModule(input_size=INPUT_SIZE, hidden_size=256, num_layers=4, num_heads=8,
                             max_seq_len=max_seq_len, in_key="observation", out_key="embed").to(device)


def reference_step_seconds(envs, context, repeats, grid, device):
    module = make_reference(grid["max_seq_len"], device).eval()
    obs = torch.randn(envs, INPUT_SIZE, device=device)
    start = torch.ones(envs, 1, dtype=torch.bool, device=device)
    cont = torch.zeros(envs, 1, dtype=torch.bool, device=device)

    def step(is_init):
        module(TensorDict({"observation": obs, "is_init": is_init}, [envs], device=device))

    per_step = []
    with torch.no_grad():
        for r in range(repeats + 1):
            step(start)
            for _ in range(1, context - TIMED_STEPS):
                step(cont)
            synchronize(device)
            begin = time.perf_counter()
            for _ in range(TIMED_STEPS):
                step(cont)
            synchronize(device)
            if r > 0:
                per_step.append((time.perf_counter() - begin) / TIMED_STEPS)
    return statistics.median(per_step)


def reference_window_seconds(batch, window, dtype, repeats, grid, device):
    module = make_reference(grid["max_seq_len"], device)
    is_init = torch.zeros(batch, window, 1, dtype=torch.bool, device=device)
    is_init[:, 0] = True
    is_init[:, window // 2] = True
    td = TensorDict({"observation": torch.randn(batch, window, INPUT_SIZE, device=device), "is_init": is_init},
                    [batch, window], device=device)
    seconds = []
    for r in range(repeats + 1):
        module.zero_grad()
        synchronize(device)
        begin = time.perf_counter()
        with set_recurrent_mode(True), autocast(device, dtype):
            loss = module(td.clone())["embed"].sum().float()
        loss.backward()
        synchronize(device)
        if r > 0:
            seconds.append(time.perf_counter() - begin)
    return statistics.median(seconds)


def cpp_seconds(binary, mode, a, b, repeats, grid, device, dtype):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    command = [binary, mode, str(a), str(b), str(repeats), "--device", device.type, "--dtype", dtype,
               "--max-seq-len", str(grid["max_seq_len"])]
    out = subprocess.run(command, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {out.returncode}: {out.stderr.strip()}")
    return json.loads(out.stdout)["seconds"]


def measure(cpp, reference, first_cpp):
    if first_cpp:
        cpp_s = cpp()
        return cpp_s, reference()
    ref_s = reference()
    return cpp(), ref_s


def verdict(ratio, target):
    if target is None:
        return None
    return "met" if ratio >= target else "missed"


def step_rows(args, grid, device):
    rows = []
    for index, (envs, context) in enumerate(grid["steps"]):
        cpp, ref = measure(
            lambda: cpp_seconds(args.kvrl_bench, "step", envs, context, args.step_repeats, grid, device, "float32"),
            lambda: reference_step_seconds(envs, context, args.step_repeats, grid, device), index % 2 == 0)
        target = grid["step_target"][1] if grid["step_target"] and envs <= grid["step_target"][0] else None
        rows.append(dict(path="cached step", shape=f"envs={envs} context={context}", dtype="float32", envs=envs,
                         context=context, cpp_us=cpp * 1e6, reference_us=ref * 1e6,
                         cpp_env_steps_per_s=envs / cpp, reference_env_steps_per_s=envs / ref,
                         throughput_ratio=ref / cpp, target=target, verdict=verdict(ref / cpp, target)))
        print_row(rows[-1])
    return rows


def window_rows(args, grid, device):
    rows = []
    for index, (batch, window, dtype) in enumerate(grid["windows"]):
        cpp, ref = measure(
            lambda: cpp_seconds(args.kvrl_bench, "window", batch, window, args.window_repeats, grid, device, dtype),
            lambda: reference_window_seconds(batch, window, dtype, args.window_repeats, grid, device),
            index % 2 == 0)
        target = grid["window_target"]
        rows.append(dict(path="window fwd+bwd", shape=f"batch={batch} window={window}", dtype=dtype, batch=batch,
                         window=window, cpp_us=cpp * 1e6, reference_us=ref * 1e6,
                         cpp_tokens_per_s=batch * window / cpp, reference_tokens_per_s=batch * window / ref,
                         throughput_ratio=ref / cpp, target=target, verdict=verdict(ref / cpp, target)))
        print_row(rows[-1])
    return rows


HEADER = (f"{'path':<15} {'shape':<22} {'dtype':<9} {'C++ (us)':>12} {'reference (us)':>15} "
          f"{'C++/ref throughput':>19} {'target':>8}")


def print_row(row):
    target = f">={row['target']:.1f}x {row['verdict']}" if row["target"] is not None else ""
    print(f"{row['path']:<15} {row['shape']:<22} {row['dtype']:<9} {row['cpp_us']:>12.1f} "
          f"{row['reference_us']:>15.1f} {row['throughput_ratio']:>18.2f}x {target}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kvrl-bench", required=True, help="path to kvrl_bench_transformer")
    parser.add_argument("--out", default="bench/results/transformer_bench.json")
    parser.add_argument("--grid", choices=sorted(GRIDS), default="cpu")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--step-repeats", type=int, default=5)
    parser.add_argument("--window-repeats", type=int, default=3)
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no usable CUDA device")
    torch.set_num_threads(1)
    torch.manual_seed(0)
    grid = GRIDS[args.grid]
    device = torch.device("cuda", 0) if args.device == "cuda" else torch.device("cpu")

    print(HEADER)
    print("-" * len(HEADER))
    rows = step_rows(args, grid, device) + window_rows(args, grid, device)
    missed = [r for r in rows if r["verdict"] == "missed"]
    print(f"targets: {sum(r['verdict'] == 'met' for r in rows)} met, {len(missed)} missed")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(dict(torch=torch.__version__, machine=platform.processor() or platform.machine(),
                       device=torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
                       grid=args.grid, threads=1,
                       model=dict(hidden_size=256, num_layers=4, num_heads=8, input_size=INPUT_SIZE,
                                  max_seq_len=grid["max_seq_len"]),
                       rows=rows), f, indent=2)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
