#!/usr/bin/env python3
"""Plots results/max_model_size.json: the largest model per configuration, ours beside the paper's.

Why this file exists: our budget and inputs are scaled down from the paper's (8 GiB accelerators,
224x224 images), so absolute sizes differ by orders of magnitude; what Table 1 shows is how much
larger a model each configuration fits than naive-1. One panel per model: parameters relative to
naive-1 for ours and the paper's (log scale), each bar labelled with its absolute size.

    python3 scripts/plot_max_model_size.py results/max_model_size.json results/max_model_size.png
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def count(n):
    for unit, scale in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f}{unit}"
    return f"{n:.0f}"


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: plot_max_model_size.py RESULT.json OUT.png")
    with open(argv[1]) as f:
        result = json.load(f)
    models = []
    for r in result["rows"]:
        if r["model"] not in models:
            models.append(r["model"])
    if not models:
        sys.exit(f"{argv[1]} has no rows")
    fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
    budget = result["budget_bytes"] / 2**20
    for ax, model in zip(axes[0], models):
        # The fp32 rows: the paper's precision (a bf16 search adds rows of its own).
        rows = [r for r in result["rows"]
                if r["model"] == model and r.get("precision", "fp32") == "fp32"]
        base = next((r for r in rows if r["config"] == "naive-1"), rows[0])
        paper_base = base["paper"]["parameters"] if base.get("paper") else None
        x = range(len(rows))
        ours = [r["parameters"] / base["parameters"] for r in rows]
        bars = ax.bar([i - 0.2 for i in x], ours, width=0.4,
                      label=f"ours ({budget:.0f} MiB per device)")
        for bar, r in zip(bars, rows):
            ax.annotate(f"{r['size']}\n{count(r['parameters'])}",
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=7)
        paper = [(i, r["paper"]) for i, r in zip(x, rows) if r.get("paper") and paper_base]
        if paper:
            pbars = ax.bar([i + 0.2 for i, _ in paper], [p["parameters"] / paper_base
                                                         for _, p in paper],
                           width=0.4, alpha=0.6, label=f"paper ({paper[0][1]['hardware']})")
            for bar, (_, p) in zip(pbars, paper):
                ax.annotate(f"{p['size']}\n{count(p['parameters'])}",
                            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                            ha="center", va="bottom", fontsize=7, color="dimgray")
        ax.set_yscale("log")
        ax.set_xticks(list(x))
        ax.set_xticklabels([r["config"] for r in rows])
        ax.set_ylabel("parameters / naive-1's")
        ax.set_title(f"{model}: largest model that fits", fontsize=10)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        ax.margins(y=0.25)
    fig.suptitle(f"GPipe Table 1, ours (preset {result['preset']}) beside the paper's",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    print(f"wrote {argv[2]}")


if __name__ == "__main__":
    main(sys.argv)
