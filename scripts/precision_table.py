#!/usr/bin/env python3
"""bf16 against fp32 through the pipeline, measured: step time, peak activation bytes per
device and bytes sent between the devices per step, for AmoebaNet-D and Transformer-L at K=2,
M=4 and M=8 (synthetic data, gpipe_train). Each round runs every configuration in fp32 and bf16
back to back; the ratio bf16 / fp32 of each round is given, with the median over the rounds.

    scripts/precision_table.py [--rounds 3] [--steps 6] [--build build] [--out results/precision]

Step time: the median of each run's steps after the first (which allocates gradients). Memory:
the trainer's peak activation bytes per device (the meter of gpipe/memory.h), which does not
depend on the machine's load. Writes speed_memory.md and speed_memory.json in --out.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

MODELS = {
    "amoebanet-d": ["--model", "amoebanet-d", "--layers", "6", "--filters", "64",
                    "--image-size", "64", "--batch-size", "64"],
    "transformer-l": ["--model", "transformer-l", "--layers", "8", "--d-model", "256",
                      "--heads", "4", "--ffn", "1024", "--seq-len", "64", "--vocab", "2000",
                      "--batch-size", "32"],
}


def run(build, model, M, precision, steps):
    with tempfile.TemporaryDirectory() as tmp:
        summary = os.path.join(tmp, "summary.json")
        cmd = [os.path.join(build, "bin", "gpipe_train"), *MODELS[model], "--partitions", "2",
               "--balance-by", "params", "--chunks", str(M), "--checkpoint", "never",
               "--steps", str(steps), "--precision", precision, "--progress", "off",
               "--json", summary]
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"precision_table: {' '.join(cmd)} failed:\n{done.stderr[-2000:]}")
        s = json.load(open(summary))
    return {"step_s": statistics.median(s["step_seconds"][1:]),
            "activation_bytes": s["peak_activation_bytes_per_device"],
            "sent_bytes": s["sent_bytes_per_step"],
            "balance": s["balance"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--build", default="build")
    parser.add_argument("--out", default="results/precision")
    args = parser.parse_args()
    if args.rounds < 1 or args.steps < 2:
        sys.exit("precision_table: --rounds must be >= 1 and --steps >= 2")
    configs = [(model, M) for model in MODELS for M in (4, 8)]
    rows = {c: {"fp32": [], "bf16": []} for c in configs}
    for r in range(args.rounds):
        for model, M in configs:
            for precision in ("fp32", "bf16"):
                rows[(model, M)][precision].append(run(args.build, model, M, precision, args.steps))
            f, b = rows[(model, M)]["fp32"][-1], rows[(model, M)]["bf16"][-1]
            print(f"round {r + 1}: {model} M={M}: step {f['step_s'] * 1e3:.0f} ms fp32, "
                  f"{b['step_s'] * 1e3:.0f} ms bf16", flush=True)
    table, out = [], []
    for (model, M), runs in rows.items():
        f, b = runs["fp32"], runs["bf16"]
        time_ratios = [y["step_s"] / x["step_s"] for x, y in zip(f, b)]
        act = [[bb / ff for ff, bb in zip(x["activation_bytes"], y["activation_bytes"])]
               for x, y in zip(f, b)]
        entry = {"model": model, "K": 2, "M": M, "balance": f[0]["balance"],
                 "fp32_step_ms": [x["step_s"] * 1e3 for x in f],
                 "bf16_step_ms": [y["step_s"] * 1e3 for y in b],
                 "step_time_ratio_rounds": time_ratios,
                 "step_time_ratio_median": statistics.median(time_ratios),
                 "fp32_activation_bytes_per_device": f[0]["activation_bytes"],
                 "bf16_activation_bytes_per_device": b[0]["activation_bytes"],
                 "activation_ratio_per_device": act[0],
                 "fp32_sent_bytes_per_step": f[0]["sent_bytes"],
                 "bf16_sent_bytes_per_step": b[0]["sent_bytes"],
                 "sent_bytes_ratio": b[0]["sent_bytes"] / f[0]["sent_bytes"]}
        out.append(entry)
        table.append(
            f"| {model} | {M} | {', '.join(f'{t:.2f}' for t in time_ratios)} | "
            f"**{entry['step_time_ratio_median']:.2f}** | "
            f"{statistics.median(entry['fp32_step_ms']):.0f} / "
            f"{statistics.median(entry['bf16_step_ms']):.0f} | "
            f"{', '.join(f'{a:.2f}' for a in act[0])} | "
            f"{f[0]['sent_bytes'] / 2**20:.2f} / {b[0]['sent_bytes'] / 2**20:.2f} MiB "
            f"(**{entry['sent_bytes_ratio']:.2f}**) |")
    os.makedirs(args.out, exist_ok=True)
    command = "scripts/precision_table.py" + "".join(
        f" --{k} {v}" for k, v in (("rounds", args.rounds), ("steps", args.steps))
        if v != parser.get_default(k))
    md = ["# bf16 over fp32 through the pipeline (K=2, in-process, CPU)", "",
          f"Command: `{command}`. {args.rounds} interleaved rounds; each round runs fp32 then bf16 "
          "back to back. Memory and bytes do not depend on the round (the first round's).", "",
          "| model | M | step time bf16/fp32, per round | median | median step ms fp32 / bf16 | "
          "peak activation bytes bf16/fp32, per device | sent per step fp32 / bf16 |",
          "|---|---|---|---|---|---|---|", *table]
    with open(os.path.join(args.out, "speed_memory.md"), "w") as fh:
        fh.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "speed_memory.json"), "w") as fh:
        json.dump({"command": command, "rows": out}, fh, indent=1)
    print("\n".join(md))


if __name__ == "__main__":
    main()
