#!/usr/bin/env python3
"""Plots results/scaling_table.json: speedup against K for each M, ours beside the paper's.

Why this file exists: GPipe's Tables 2 and 3 are easiest to compare as curves. One panel per
(table, model); for each M our projected speedups are a solid line, our measured ones crosses,
and the paper's figures (TPUs for Table 2, P100s without NVLink for Table 3) a dashed line.

    python3 scripts/plot_scaling_table.py results/scaling_table.json results/scaling_table.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: plot_scaling_table.py RESULT.json OUT.png")
    with open(argv[1]) as f:
        result = json.load(f)
    tables = result["tables"]
    panels = [(t, m) for t in tables for m in t["models"]]
    if not panels:
        sys.exit(f"{argv[1]} has no tables")
    columns = max(len(t["models"]) for t in tables)
    fig, axes = plt.subplots(len(tables), columns, figsize=(5.5 * columns, 4.2 * len(tables)),
                             squeeze=False)
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # One colour per M across every panel, so Table 3's M=32 matches Table 2's.
    all_chunks = sorted({M for t in tables for M in t["chunks"]})
    color_of = {M: cycle[i % len(cycle)] for i, M in enumerate(all_chunks)}
    for row, table in enumerate(tables):
        for col in range(columns):
            ax = axes[row][col]
            if col >= len(table["models"]):
                ax.axis("off")
                continue
            model = table["models"][col]
            rows = [r for r in result["rows"]
                    if r["table"] == table["id"] and r["model"] == model["model"]]
            for M in table["chunks"]:
                color = color_of[M]
                for source, style in (("projected", "-o"), ("measured", "X")):
                    points = sorted((r["K"], r["speedup"]) for r in rows
                                    if r["M"] == M and r["source"] == source
                                    and r["speedup"] is not None)
                    if points:
                        ax.plot(*zip(*points), style, color=color,
                                markersize=8 if source == "projected" else 10,
                                markeredgecolor="black" if source == "measured" else color,
                                label=f"M={M} ours ({source})")
                paper = sorted({(r["K"], r["paper_speedup"]) for r in rows
                                if r["M"] == M and r["paper_speedup"] is not None})
                if paper:
                    ax.plot(*zip(*paper), "--s", color=color, alpha=0.5, markersize=5,
                            label=f"M={M} paper")
            ax.set_xscale("log", base=2)
            ax.set_xticks(table["partitions"])
            ax.set_xticklabels([str(k) for k in table["partitions"]])
            ax.set_xlabel("K (partitions)")
            base = table["baseline"]
            ax.set_ylabel(f"speedup over K={base['K']}, M={base['M']}")
            title = "Table 2" if table["id"] == "table2" else "Table 3"
            ax.set_title(f"{title}: {model['label']}\n(N={model['batch']}; link {table['link']}; "
                         f"paper: {table['paper_hardware']})", fontsize=9)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"GPipe Tables 2 and 3, ours (preset {result['preset']}) beside the paper's",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    print(f"wrote {argv[2]}")


if __name__ == "__main__":
    main(sys.argv)
