#!/usr/bin/env python3
"""Plots results/step_breakdown.json: where each step's device-time goes, as stacked bars.

Why this file exists: the breakdown's point is which overhead is largest at each K and M (the
bubble, re-materialisation, imbalance, communication or the optimizer), which a stacked bar per
row shows at a glance. One column per model: bars by (K, M), measured rows marked "m"; below,
the bubble and the speedup over naive-2 against M for each K, with the 5% line and the paper's
M = 4K marked.

    python3 scripts/plot_step_breakdown.py results/step_breakdown.json results/step_breakdown.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PARTS = ["forward", "backward", "recompute", "bubble", "imbalance", "communication", "optimizer"]
COLOURS = ["#4c72b0", "#55a868", "#c44e52", "#dddddd", "#8172b2", "#ccb974", "#64b5cd"]


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: plot_step_breakdown.py RESULT.json OUT.png")
    with open(argv[1]) as f:
        result = json.load(f)
    rows = result["rows"]
    if not rows:
        sys.exit(f"{argv[1]} has no rows")
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(3, len(models), figsize=(7 * len(models), 12), squeeze=False)
    for column, model in enumerate(models):
        ax = axes[0][column]
        mine = [r for r in rows if r["model"] == model]
        labels = [f"K{r['K']} M{r['M']}" + (" m" if r["source"] == "measured" else "")
                  for r in mine]
        bottom = [0.0] * len(mine)
        for part, colour in zip(PARTS, COLOURS):
            values = [r[part] for r in mine]
            ax.bar(range(len(mine)), values, bottom=bottom, color=colour, label=part)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set_xticks(range(len(mine)))
        ax.set_xticklabels(labels, rotation=60, fontsize=8)
        ax.set_ylim(0, 1)
        ax.set_ylabel("share of K devices x step")
        ax.set_title(f"{model} ({result.get('link', '')} link; m: measured)", fontsize=10)
        for row, key, label in ((1, "bubble", "bubble"), (2, "speedup", "speedup over naive-2")):
            ax = axes[row][column]
            series = sorted({(r["K"], r["source"]) for r in mine})
            for K, source in series:
                points = sorted((r["M"], r[key]) for r in mine
                                if r["K"] == K and r["source"] == source and r[key] is not None)
                if not points:
                    continue
                style = "o-" if source == "simulated" else "x--"
                line, = ax.plot([p[0] for p in points], [p[1] for p in points], style,
                                label=f"K={K} {source}")
                ax.axvline(4 * K, color=line.get_color(), linestyle=":", linewidth=0.8)
            if key == "bubble":
                ax.axhline(0.05, color="black", linestyle="--", linewidth=0.8)
            ax.set_xscale("log", base=2)
            ax.set_xlabel("M (dotted: the paper's M = 4K)")
            ax.set_ylabel(label)
            ax.legend(fontsize=7)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)


if __name__ == "__main__":
    main(sys.argv)
