"""Top ops by self time in a LibTorch profiler trace (torch::autograd::profiler::RecordProfile,
chrome://tracing format), such as bench/window_attention_bench.cpp writes.

    python bench/trace_top_ops.py TRACE [TRACE ...] [--top 12]

Self time: an op's duration less that of the ops it called (nested on the same thread).
"""
import argparse
import collections
import json


def self_times(events):
    """{name: (self microseconds, calls)} from complete ("X") events."""
    by_thread = collections.defaultdict(list)
    for event in events:
        if event.get("ph") == "X":
            by_thread[event.get("tid")].append(event)
    totals = collections.defaultdict(lambda: [0.0, 0])
    for thread_events in by_thread.values():
        # Parents start first; at equal starts the longer one encloses the other.
        thread_events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [end, name, children's time]
        def close_until(ts):
            while stack and stack[-1][0] <= ts:
                end, name, children, duration = stack.pop()
                totals[name][0] += duration - children
                totals[name][1] += 1
                if stack:
                    stack[-1][2] += duration
        for event in thread_events:
            close_until(event["ts"])
            stack.append([event["ts"] + event["dur"], event["name"], 0.0, event["dur"]])
        close_until(float("inf"))
    return totals


def top_ops(path, top):
    with open(path) as f:
        text = f.read().strip()
    # RecordProfile ends its list with a trailing comma on some versions.
    events = json.loads(text if text.endswith("]") else text.rstrip(",") + "]")
    totals = self_times(events)
    whole = sum(t for t, _ in totals.values())
    ranked = sorted(totals.items(), key=lambda item: -item[1][0])[:top]
    return whole, [dict(op=name, self_ms=t / 1e3, share=t / whole, calls=calls) for name, (t, calls) in ranked]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("traces", nargs="+")
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()
    for path in args.traces:
        whole, ranked = top_ops(path, args.top)
        print(f"{path}: {whole / 1e3:.2f} ms of ops")
        for row in ranked:
            print(f"  {row['op']:<44} {row['self_ms']:>8.2f} ms {100 * row['share']:>5.1f}% {row['calls']:>6} calls")


if __name__ == "__main__":
    main()
