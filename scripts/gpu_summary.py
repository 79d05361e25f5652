#!/usr/bin/env python3
"""Writes summary.md and summary.json of a scripts/gpu_check.sh run from the files it left in
its folder: the CUDA tests' GoogleTest XML, engine_overhead's JSON for the MLP and the paper's
models, and eager_reference.py's JSON.

  python3 scripts/gpu_summary.py results/gpu --torch "2.11.0+cu130 13.0 True" --dry-run 0

Standard library only: a GPU machine's python3 has torch and nothing else.
"""
import argparse
import json
import pathlib
import statistics
import xml.etree.ElementTree as ET


def test_results(folder):
    """Per test program: every test case with its result."""
    programs = {}
    for path in sorted(folder.glob("*_cuda_tests.xml")):
        cases = []
        for case in ET.parse(path).getroot().iter("testcase"):
            if case.find("failure") is not None:
                result = "failed"
            elif case.get("result") == "skipped" or case.find("skipped") is not None:
                result = "skipped"
            else:
                result = "passed"
            cases.append({"name": f"{case.get('classname')}.{case.get('name')}", "result": result,
                          "seconds": float(case.get("time", 0))})
        programs[path.name.replace("_cuda_tests.xml", "")] = cases
    return programs


def load(folder, name):
    path = folder / name
    return json.loads(path.read_text()) if path.exists() else None


def tests_section(programs):
    lines = ["## CUDA tests", "", "| program | passed | failed | skipped |", "|---|---|---|---|"]
    for program, cases in programs.items():
        count = {r: sum(c["result"] == r for c in cases) for r in ("passed", "failed", "skipped")}
        lines.append(f"| {program} | {count['passed']} | {count['failed']} | {count['skipped']} |")
    failed = [c["name"] for cases in programs.values() for c in cases if c["result"] == "failed"]
    if failed:
        lines += ["", "Failed: " + ", ".join(failed)]
    return lines


def mlp_section(engine, eager):
    mlp = engine["model"]
    lines = ["## The MLP: engine, plain LibTorch and PyTorch eager, the input placed alike", "",
             f"MLP {mlp.get('in_features')} -> {mlp.get('width')} x {mlp.get('layers')} -> "
             f"{mlp.get('classes')}, batch {engine['batch_size']}, SGD; median ms per step over "
             f"{engine['rounds']} interleaved rounds of {engine['steps_per_round']} steps. "
             "plain / engine above 1 means the engine is faster.", "",
             "| M | input | PyTorch eager | plain LibTorch | engine K=1 | plain / engine | "
             "eager / engine |", "|---|---|---|---|---|---|---|"]
    eager_ms = {(r["chunks"], r["input"]): r["ms_median"] for r in (eager or {}).get("rows", [])}
    for row in engine["rows"]:
        e = eager_ms.get((row["chunks"], row["input"]))
        ratio = f"{e / row['engine_ms_median']:.3f}" if e else "-"
        shown = f"{e:.3f}" if e else "-"
        lines.append(f"| {row['chunks']} | {row['input']} | {shown} | {row['plain_ms_median']:.3f}"
                     f" | {row['engine_ms_median']:.3f} | {row['plain_over_engine']:.3f} | {ratio} |")
    return lines


def models_section(runs):
    lines = ["## The paper's models: engine K=1 M=1 against the plain loop of the same layers", "",
             "| model | configuration | batch | input | plain ms | engine ms | plain / engine |",
             "|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        knobs = ", ".join(f"{k} {v}" for k, v in run["model"].items() if k != "name")
        for row in run["rows"]:
            lines.append(f"| {name} | {knobs} | {run['batch_size']} | {row['input']} | "
                         f"{row['plain_ms_median']:.3f} | {row['engine_ms_median']:.3f} | "
                         f"{row['plain_over_engine']:.3f} |")
    return lines


def ratio(top, bottom):
    return f"{top / bottom:.3f}" if top else "-"


def bf16_section(engine, eager):
    """The paper's models in bf16: the engine and the plain loop under autocast, and PyTorch
    eager under torch.autocast where the check ran it."""
    lines = ["## bf16: engine, plain LibTorch and PyTorch eager under autocast, K=1 M=1", "",
             "| model | batch | input | PyTorch eager ms | plain ms | engine ms | "
             "plain / engine | eager / engine |", "|---|---|---|---|---|---|---|---|"]
    for name, run in engine.items():
        eager_ms = {(r["chunks"], r["input"]): r["ms_median"]
                    for r in (eager.get(name) or {}).get("rows", [])}
        for row in run["rows"]:
            e = eager_ms.get((row["chunks"], row["input"]))
            lines.append(f"| {name} | {run['batch_size']} | {row['input']} | "
                         f"{f'{e:.3f}' if e else '-'} | {row['plain_ms_median']:.3f} | "
                         f"{row['engine_ms_median']:.3f} | {row['plain_over_engine']:.3f} | "
                         f"{ratio(e, row['engine_ms_median'])} |")
    return lines


def two_stage_section(runs):
    lines = ["## The paper's models trained as two stages on one GPU (the CUDA test)", "",
             "| model | batch | M | first loss | last loss | median step ms | peak bytes per stage |",
             "|---|---|---|---|---|---|---|"]
    for name, run in runs.items():
        steps = run["steps"]
        ms = statistics.median(s["step_ms"] for s in steps)
        lines.append(f"| {name} | {run['batch_size']} | {run['chunks']} | {steps[0]['loss']:.4f} | "
                     f"{steps[-1]['loss']:.4f} | {ms:.2f} | {steps[-1]['peak_bytes']} |")
    return lines


def train_section(runs):
    lines = ["## gpipe_train on synthetic data (the quick presets)", "",
             "| preset and precision | balance | steps | median step s | samples/s | last loss | "
             "peak bytes per device | sent bytes per step |", "|---|---|---|---|---|---|---|---|"]
    for preset, run in runs.items():
        median = statistics.median(run["step_seconds"]) if run["step_seconds"] else float("nan")
        lines.append(f"| {preset} | {run['balance']} | {run['steps']} | {median:.4f} | "
                     f"{run['throughput_samples_per_s']:.1f} | {run['losses'][-1]:.4f} | "
                     f"{run['peak_memory_bytes_per_device']} | "
                     f"{run.get('sent_bytes_per_step', '-')} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--torch", default="?", help="what torch reported of itself")
    parser.add_argument("--dry-run", type=int, choices=(0, 1), default=0)
    args = parser.parse_args()
    folder = args.folder
    programs = test_results(folder)
    engine_mlp, eager = load(folder, "engine_overhead_mlp.json"), load(folder, "eager_mlp.json")
    models = {m: load(folder, f"engine_overhead_{m}.json") for m in ("amoebanet-d", "transformer-l")}
    models = {m: run for m, run in models.items() if run}
    bf16 = {m: load(folder, f"engine_overhead_{m}_bf16.json")
            for m in ("amoebanet-d", "transformer-l")}
    bf16 = {m: run for m, run in bf16.items() if run}
    eager_bf16 = {m: load(folder, f"eager_{m}_bf16.json")
                  for m in ("amoebanet-d", "transformer-l", "mlp")}
    two_stage = {m: load(folder, f"{m}.json") for m in ("amoebanet-d", "transformer-l")}
    two_stage = {m: run for m, run in two_stage.items() if run}
    train = {p.stem.replace("train_", ""): json.loads(p.read_text())
             for p in sorted(folder.glob("train_*.json"))}
    where = engine_mlp["device"] if engine_mlp else "?"
    lines = ["# GPU check" + (" (dry run on the CPU)" if args.dry_run else ""), "",
             f"torch {args.torch}; device {where}. Made by `scripts/gpu_check.sh"
             + (" --dry-run`" if args.dry_run else "`") + "; each command is in commands.txt, "
             "the whole output in gpu_check.log.", ""]
    if args.dry_run:
        lines += ["A dry run builds against PyTorch 2.x and runs every step on the CPU with small "
                  "sizes: the CUDA tests skip, and its timings say nothing of a GPU.", ""]
    lines += tests_section(programs) + [""]
    if engine_mlp:
        lines += mlp_section(engine_mlp, eager) + [""]
    if models:
        lines += models_section(models) + [""]
    if bf16:
        lines += bf16_section(bf16, eager_bf16) + [""]
    if two_stage:
        lines += two_stage_section(two_stage) + [""]
    if train:
        lines += train_section(train) + [""]
    (folder / "summary.md").write_text("\n".join(lines))
    summary = {"torch": args.torch, "dry_run": bool(args.dry_run), "tests": programs,
               "mlp": {"engine": engine_mlp, "eager": eager}, "models": models,
               "bf16": {"engine": bf16, "eager": eager_bf16},
               "two_stage": two_stage, "train": train}
    (folder / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print("\n".join(lines))
    failed = sum(c["result"] == "failed" for cases in programs.values() for c in cases)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
