#!/usr/bin/env python3
"""Draws a simulated schedule: gpipe_sim's Chrome trace as one row of boxes per device.

Why this file exists: the bubble of a schedule is a picture before it is a number. Each box is
one action of the simulated step (F blue, B orange, W green, R grey), labelled with its
micro-batch; a device's second virtual stage is hatched. The title carries the bubble.

    python3 scripts/plot_schedule.py TRACE.json SIM.json OUT.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLOURS = {"F": "#4c72b0", "B": "#dd8452", "W": "#55a868", "R": "#8c8c8c"}


def main(argv):
    if len(argv) != 4:
        sys.exit("usage: plot_schedule.py TRACE.json SIM.json OUT.png")
    with open(argv[1]) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    with open(argv[2]) as f:
        sim = json.load(f)
    devices = sim["partitions"]
    v = sim.get("virtual_stages", 1)
    fig, ax = plt.subplots(figsize=(12, 0.6 * devices + 1.2))
    for e in events:
        kind, m = e["name"][0], e["name"][1:]
        stage = e["args"].get("virtual_stage", e["tid"])
        second = v > 1 and stage >= devices  # the device's later virtual stage
        start, width = e["ts"] / 1e3, e["dur"] / 1e3
        ax.barh(e["tid"], width, left=start, height=0.8, color=COLOURS.get(kind, "black"),
                edgecolor="white", hatch="//" if second else None)
        ax.text(start + width / 2, e["tid"], kind + m, ha="center", va="center", fontsize=6,
                color="white")
    ax.set_yticks(range(devices))
    ax.set_yticklabels([f"device {d}" for d in range(devices)])
    ax.invert_yaxis()
    ax.set_xlabel("time (ms)")
    ax.set_title(f"{sim['schedule']}: K={devices}, M={sim['chunks']}, v={v}, "
                 f"bubble {sim['bubble_fraction']:.3f}")
    fig.tight_layout()
    fig.savefig(argv[3], dpi=120)


if __name__ == "__main__":
    main(sys.argv)
