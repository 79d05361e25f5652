#!/usr/bin/env python3
"""Markdown table of model_info JSON files: our parameter count against the paper's, with the
time and memory model_info took and the balance it found. Usage: make_table.py FILE.json..."""
import json
import sys


def knobs(config):
    if config["name"].startswith("amoebanet"):
        return f"(L={config['layers']}, D={config['filters']})"
    return (f"L={config['layers']}, d={config['d_model']}, ffn={config['ffn']}, "
            f"heads={config['heads']}, vocab={config['vocab']}")


def counted(r):
    how = r["counted"]
    return how + (", checked by building" if r["verified_by_building"] else "")


def main(paths):
    rows = [json.load(open(path)) for path in paths]
    rows.sort(key=lambda r: (r["model"], r["parameters"]))
    print("# Parameter counts: ours against GPipe's Table 1 and Table 4\n")
    print("Made by `commands.sh` from the `model_info` JSON files in this folder (1000 classes "
          "and 224x224x3 images for AmoebaNet). \"Counted\": AmoebaNet builds each layer, counts "
          "and drops it; Transformer-L uses its formula, and `--verify-by-building` also built "
          "every layer and found the same count. Time and peak resident memory are those of "
          "the whole `model_info` run.\n")
    print("| model | configuration | ours | paper | ours vs paper | counted | layers | "
          "balance (params) | model_info time | peak memory |")
    print("|---|---|---:|---:|---:|---|---:|---|---:|---:|")
    for r in rows:
        paper = r.get("paper_parameters")
        print(f"| {r['model']} | {knobs(r['config'])} | {r['parameters']:,} | "
              f"{paper:,.0f} | {r['deviation_percent']:+.2f}% | {counted(r)} | {len(r['layers'])} | "
              f"K={r['partitions']}: {','.join(str(b) for b in r['balance'])} | "
              f"{r['seconds']:.1f} s | {r['peak_rss_bytes'] / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main(sys.argv[1:])
