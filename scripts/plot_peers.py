#!/usr/bin/env python3
"""Plots results/peers/peers.json: ours / PyTorch's pipelining per schedule and M, a panel per
model.

Why this file exists: the comparison's claim is one line, "no schedule behind theirs"; a bar per
(schedule, M) with every round's ratio as a dot shows it and its spread at a glance, with the
1.0 and 1.05 lines the claim is held to.

    python3 scripts/plot_peers.py results/peers/peers.json results/peers/peers.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def draw(ax, model, rows, side):
    schedules = list(dict.fromkeys(r["schedule"] for r in rows))
    chunks = sorted({r["M"] for r in rows})
    width = 0.8 / len(chunks)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labelled = set()
    for row in rows:
        i, j = schedules.index(row["schedule"]), chunks.index(row["M"])
        x = i + (j - (len(chunks) - 1) / 2) * width
        ax.bar(x, row[f"{side}_ratio"], width, color=cycle[j % len(cycle)],
               label=None if row["M"] in labelled else f"M={row['M']}")
        labelled.add(row["M"])
        rounds = row[f"{side}_ratio_rounds"]
        ax.plot([x] * len(rounds), rounds, "k.", markersize=3)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.axhline(1.05, color="gray", linestyle="--", linewidth=0.8)
    ax.set_xticks(range(len(schedules)))
    ax.set_xticklabels(schedules, rotation=25, fontsize=8)
    ax.set_ylabel(f"{side.replace('_', '-')} / theirs (samples/s)")
    ax.set_title(f"{model}, K=2 (dots: rounds)")
    ax.legend(fontsize=7)


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: plot_peers.py RESULT.json OUT.png")
    with open(argv[1]) as f:
        result = json.load(f)
    sides = [s for s in ("ours", "ours_distributed") if f"{s}_ratio" in result["rows"][0]]
    panels = [(model, side) for model in dict.fromkeys(r["model"] for r in result["rows"])
              for side in sides]
    panels = [(m, s, [r for r in result["rows"] if r["model"] == m and r[f"{s}_ratio"]])
              for m, s in panels]
    panels = [p for p in panels if p[2]]
    if not panels:
        sys.exit(f"{argv[1]} has no cell that the engine and theirs both ran")
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 4 * len(panels)), squeeze=False)
    for ax, (model, side, rows) in zip(axes[:, 0], panels):
        draw(ax, model, rows, side)
    fig.suptitle("This engine against torch.distributed.pipelining, the same LibTorch")
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)


if __name__ == "__main__":
    main(sys.argv)
