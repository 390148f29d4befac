"""Does a MiniGrid Memory policy use its memory? Success split by what the first view showed.

In MiniGrid-MemoryS7-v0 the agent starts in the room facing the hallway. When it starts in
the room's first column (about a quarter of the resets) its first view holds the object to
remember and both objects at the hallway's end; elsewhere it holds only the two at the end,
and the policy must turn to see the first. A policy that finds the object succeeds on
nearly every episode of both kinds; one that picks an end at random, on half of each. At
the 7x7 view a memoryless policy can find it too, by looking back from the hallway's end,
where the start room's object and both others are in view at once: the trace's actions
show which way a policy found it (docs/training.md).

    kvrl eval RUN/checkpoints/checkpoint-N.pt --episodes 400 --trace /tmp/trace.pt
    python bench/minigrid_memory_breakdown.py /tmp/trace.pt

Reads observations as MiniGrid's image codes ([7, 7, 3], `ImgObsWrapper`) or their one-hot
form ([7, 7, 20], `OneHotPartialObsWrapper` then `ImgObsWrapper`).
"""
import argparse
import json

import torch

KEY, BALL = 5, 6  # MiniGrid's OBJECT_TO_IDX
VIEW = 7
CODE_CHANNELS, ONE_HOT_CHANNELS = 3, 20


def objects_in_view(observation):
    """How many keys and balls one flat observation shows."""
    channels = observation.numel() // (VIEW * VIEW)
    grid = observation.reshape(VIEW, VIEW, channels)
    if channels == CODE_CHANNELS:
        kinds = grid[..., 0]
        return int(((kinds == KEY) | (kinds == BALL)).sum())
    if channels == ONE_HOT_CHANNELS:
        return int((grid[..., KEY] + grid[..., BALL]).sum())
    raise SystemExit(f"an observation of {observation.numel()} values is not a 7x7 view of "
                     f"{CODE_CHANNELS} codes or {ONE_HOT_CHANNELS} one-hot channels")


def breakdown(episodes):
    groups = {"first view shows all three objects": [], "first view shows the two at the end": []}
    for episode in episodes:
        success = float(episode["rewards"].sum()) > 0
        seen_at_start = objects_in_view(episode["observations"][0]) >= 3
        groups["first view shows all three objects" if seen_at_start else "first view shows the two at the end"].append(success)
    return {name: {"episodes": len(outcomes), "success_rate": sum(outcomes) / len(outcomes) if outcomes else None}
            for name, outcomes in groups.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace", help="the file `kvrl eval --trace` wrote")
    args = parser.parse_args()
    episodes = torch.load(args.trace, weights_only=True)["episodes"]
    result = breakdown(episodes)
    print("| first view | episodes | success rate |\n|---|---:|---:|")
    for name, row in result.items():
        rate = "-" if row["success_rate"] is None else f"{row['success_rate']:.2f}"
        print(f"| {name} | {row['episodes']} | {rate} |")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
