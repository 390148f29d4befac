#!/usr/bin/env python3
"""Writes the results of scripts/device-check.sh: OUT/results.json and OUT/results.md.

Called after every step, so a run cut short still leaves a table of what it measured.
Reads OUT/steps.jsonl (one line per finished step) and whichever benchmark outputs exist
so far (transformer_bench.json, device_bench.json, collectives_bench.json, rank0.json).
Standard library only: the GPU machine may have nothing else.

    python scripts/device_check_report.py OUT --mode gpu|rehearse
"""
import argparse
import datetime
import json
import os
import platform


def read_json(path):
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def read_steps(out):
    path = os.path.join(out, "steps.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def transformer_rows(bench):
    rows = []
    for row in bench.get("rows", []):
        target = f">= {row['target']:.1f}x: {row['verdict']}" if row.get("target") is not None else "none"
        rows.append((f"{row['path']} {row['shape']} {row['dtype']}",
                     f"{row['throughput_ratio']:.2f}x vs TorchRL (kvrl {row['cpp_us']:.0f} us, "
                     f"reference {row['reference_us']:.0f} us)", target))
    return rows


def device_bench_rows(bench):
    rows = [(f"actor step envs={r['envs']} on {r['device']}", f"{r['env_steps_per_s']:.0f} env steps/s "
             f"({r['us_per_step']:.0f} us/step)", "none") for r in bench.get("actor_step", [])]
    rows += [(f"learner window [32, 512] on {r['device']}", f"{r['tokens_per_s']:.0f} tokens/s", "none")
             for r in bench.get("learner_window", [])]
    return rows


def collectives_rows(bench):
    where = f"{bench.get('transport', '?')}, {bench.get('ranks', '?')} rank(s)"
    rows = [(f"all-reduce / broadcast {r['bytes']} B ({where})",
             f"{r['all_reduce_us']:.1f} / {r['broadcast_us']:.1f} us, busbw {r['all_reduce_busbw_gbps']:.3g} / "
             f"{r['broadcast_busbw_gbps']:.3g} GB/s", "none") for r in bench.get("rows", [])]
    rows += [(f"learner step, buckets of {r['bucket_bytes']} B ({where})",
              f"{r['after_backward_ms']:.1f} ms mean after backward, {r['overlapped_ms']:.1f} ms overlapped", "none")
             for r in bench.get("overlap", {}).get("rows", [])]
    return rows


def training_rows(learner):
    if learner is None:
        return []
    mean_return = learner.get("mean_return")
    verdict = "met" if mean_return is not None and mean_return >= 450 else "missed"
    return [("CartPole, 1 learner + 2 actors", f"mean return {mean_return:.1f}", f">= 450: {verdict}")]


def figures(out):
    sources = [("transformer_bench.json", transformer_rows), ("device_bench.json", device_bench_rows),
               ("collectives_bench.json", collectives_rows)]
    rows = []
    for name, to_rows in sources:
        bench = read_json(os.path.join(out, name))
        if bench is not None:
            rows += to_rows(bench)
    return rows + training_rows(read_json(os.path.join(out, "rank0.json")))


def markdown(summary):
    lines = [f"# device-check ({summary['mode']}), {summary['date']}", "",
             f"Machine: {summary['machine']}. Steps passed: {summary['passed']} of {summary['finished']} finished.",
             "", "| step | status | seconds (estimate / limit) | log |", "|---|---|---|---|"]
    for step in summary["steps"]:
        lines.append(f"| {step['step']} | {step['status']} | {step['seconds']} ({step['estimate_s']} / "
                     f"{step['limit_s']}) | {step['log']} |")
    lines += ["", "| measurement | figure | target |", "|---|---|---|"]
    lines += [f"| {what} | {figure} | {target} |" for what, figure, target in summary["figures"]]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--mode", choices=["gpu", "rehearse"], required=True)
    args = parser.parse_args()
    steps = read_steps(args.out)
    summary = dict(mode=args.mode, date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   machine=f"{platform.node()} {platform.machine()}", finished=len(steps),
                   passed=sum(s["status"] == "passed" for s in steps), steps=steps, figures=figures(args.out))
    # Written whole to a temporary name and renamed, so a run killed mid-write keeps the last table.
    for name, text in (("results.json", json.dumps(summary, indent=2) + "\n"), ("results.md", markdown(summary))):
        path = os.path.join(args.out, name)
        with open(path + ".tmp", "w") as f:
            f.write(text)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
