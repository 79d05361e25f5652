#!/usr/bin/env python3
"""peers.py: this engine side by side with PyTorch's own pipelining, on the same LibTorch.

Why this file exists: torch.distributed.pipelining ships the schedules this engine runs, and a
researcher will hold the engine against it first. This driver runs both back to back, cell by
cell, in interleaved rounds (the order reversed every other round, so that a machine whose speed
drifts slows both alike), and writes the ratios with every round's value.

Contenders, for each model, each schedule both have and each M, at K = 2:
  ours    build-torch2/bin/gpipe_train: K CPU virtual devices in one process, one intra-op
          thread each (the LibTorch 2.11 build, the venv's);
  ours-distributed  the same as K processes over Gloo on loopback (--distributed, launched by
          scripts/launch.sh): theirs' transport class;
  theirs  experiments/peers/theirs.py: PyTorch's pipelining on K Gloo ranks on loopback, one
          intra-op thread each, the same layers, balance, batch and SGD.
Beside them: naive-2 (GPipe at M = 1) of both, and PyTorch's plain eager loop at 1 and 2
threads. Before timing, each side's losses of its first steps must equal its own plain
model's at the same M: theirs against the eager model run micro-batch by micro-batch
(theirs.py checks), ours against the engine's own K = 1 run (the engine's tests compare that
with a plain LibTorch loop). A contender that fails is recorded with its error, one line; a
workaround to PyTorch's side is used only where the fix is plainly theirs (theirs.py's
WORKAROUNDS) and the table says so.

  python3 experiments/peers/peers.py --models mlp --rounds 3 --out results/peers/peers
  (on an otherwise idle machine, after scripts/test_torch2.sh built build-torch2; --help for the
  rest)
"""
import argparse
import csv
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
THEIRS = os.path.join(ROOT, "experiments", "peers", "theirs.py")
SCHEDULES = ["gpipe", "1f1b", "zb-h1", "interleaved-1f1b", "looped-bfs", "zbv", "dualpipev"]
TWO_STAGES_A_DEVICE = {"interleaved-1f1b", "looped-bfs", "zbv", "dualpipev"}
V_SCHEDULES = {"zbv", "dualpipev"}
# The engine in one process (CPU virtual devices) and as K processes over Gloo, as theirs runs.
ENGINE_SIDES = ["ours", "ours-distributed"]
LAUNCH = os.path.join(ROOT, "scripts", "launch.sh")

# Each model's flags, the same for gpipe_train and theirs.py, and its engine layer count.
MODELS = {
    "mlp": {"in-features": 2048, "width": 2048, "layers": 8, "classes": 10,
            "batch-size": 1024},
    "amoebanet-d": {"layers": 6, "filters": 64, "image-size": 64, "channels": 3, "classes": 10,
                    "batch-size": 64},
    "transformer-l": {"layers": 8, "d-model": 256, "ffn": 1024, "heads": 8, "seq-len": 64,
                      "vocab": 1000, "batch-size": 64},
}


def engine_layer_count(model, config):
    """MLP: hidden layers and the classifier; Transformer-L: embedding, layers, head;
    AmoebaNet-D: stem, 2 + 2 reduction cells, L normal cells, head."""
    return config["layers"] + {"mlp": 1, "transformer-l": 2, "amoebanet-d": 6}[model]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="mlp", help="a subset of: " + ", ".join(MODELS))
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="override a model flag for every model that has it (e.g. width=64)")
    p.add_argument("--engine", default=",".join(ENGINE_SIDES),
                   help="the engine's contenders: ours (K virtual devices in one process), "
                        "ours-distributed (K processes over Gloo, --distributed), or both")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (at least 1)")
    p.add_argument("--chunks", default="2,4,8", help="the Ms, comma-separated")
    p.add_argument("--schedules", default=",".join(SCHEDULES),
                   help="a subset of: " + ", ".join(SCHEDULES))
    p.add_argument("--check-steps", type=int, default=3,
                   help="untimed steps first, whose losses are checked")
    p.add_argument("--steps", type=int, default=5, help="timed steps; the median counts")
    p.add_argument("--python", default=os.path.expanduser("~/.cache/gpipe/torch-2.11.0/bin/python"),
                   help="the venv's python (scripts/install_deps.sh --torch2 prints it)")
    p.add_argument("--ours", default=os.path.join(ROOT, "build-torch2", "bin", "gpipe_train"),
                   help="the engine's trainer built on the same LibTorch")
    p.add_argument("--timeout", type=int, default=600, help="seconds one contender may run")
    p.add_argument("--out", required=True, help="path prefix of the .md, .csv, .json and .png")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 when any contender failed or trained something else (CI)")
    args = p.parse_args()
    check_args(p, args)
    return args


def check_args(p, args):
    """Parses the lists in place; exits 2 with one line naming a bad value."""
    try:
        args.chunks = [int(m) for m in args.chunks.split(",")]
    except ValueError:
        p.error(f"--chunks {args.chunks!r} is not a comma-separated list of integers")
    args.models, args.schedules = args.models.split(","), args.schedules.split(",")
    args.engine = args.engine.split(",")
    for name, values, known in (("--models", args.models, MODELS),
                                ("--schedules", args.schedules, SCHEDULES),
                                ("--engine", args.engine, ENGINE_SIDES)):
        bad = [v for v in values if v not in known]
        if bad:
            p.error(f"{name} {bad[0]!r} is not one of {', '.join(known)}")
    if 1 in args.chunks:
        p.error("--chunks 1: M=1 is naive-2, which every model runs; give the pipelines' Ms")
    if args.rounds < 1 or min(args.chunks) < 1 or args.steps < 1 or args.check_steps < 1:
        p.error("--rounds, --chunks, --steps and --check-steps must be at least 1")
    for item in args.set:
        key, _, value = item.partition("=")
        if not value.isdigit() or not any(key in c for c in MODELS.values()):
            p.error(f"--set {item!r}: give FLAG=VALUE with a model flag and a positive integer")
        for config in MODELS.values():
            if key in config:
                config[key] = int(value)
    for path in (args.python, args.ours):
        if not os.access(path, os.X_OK):
            p.error(f"{path} is not an executable (scripts/install_deps.sh --torch2; "
                    f"scripts/test_torch2.sh builds build-torch2)")


def balance_of(model, schedule, K=2):
    """The one cut both sides take: the layers evenly over the stages, the remainder on the
    last ones (per device at one stage a device, per stage in stage order otherwise)."""
    layers = engine_layer_count(model, MODELS[model])
    stages = K * (2 if schedule in TWO_STAGES_A_DEVICE else 1)
    cut = [layers // stages] * stages
    for i in range(layers % stages):
        cut[stages - 1 - i] += 1
    return cut


def model_flags(model):
    flags = ["--model", model]
    for key, value in MODELS[model].items():
        flags += ["--" + key, str(value)]
    return flags


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ours_command(args, cell, json_path, K=2, distributed=False):
    """gpipe_train on K CPU virtual devices, or as K processes over Gloo (scripts/launch.sh;
    rank 0 writes the JSON, with the loss every rank agreed on)."""
    model, schedule, M = cell
    launch = [LAUNCH, "--nproc-per-node", str(K), "--master-port", str(free_port()), "--"]
    cmd = [*(launch if distributed else []), args.ours, *model_flags(model),
           *(["--distributed"] if distributed else []),
           "-K", str(K), "-M", str(M), "--schedule", schedule,
           "--checkpoint", "never", "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0",
           "--steps", str(args.check_steps + args.steps), "--json", json_path,
           "--progress", "off", "--log-level", "warn", "--eval-every", "-1"]
    if K > 1:
        flag = "--stage-balance" if schedule in TWO_STAGES_A_DEVICE else "--balance"
        cmd += [flag, ",".join(map(str, balance_of(model, schedule, K)))]
    return cmd


def theirs_command(args, cell, json_path, workarounds=(), threads=None):
    model, schedule, M = cell
    cmd = [args.python, THEIRS, *model_flags(model), "--check-steps", str(args.check_steps),
           "--steps", str(args.steps), "--json", json_path]
    if threads is not None:
        return cmd + ["--plain", "--threads", str(threads), "-M", "1"]
    cmd += ["--schedule", schedule, "-K", "2", "-M", str(M),
            "--balance", ",".join(map(str, balance_of(model, schedule)))]
    for w in workarounds:
        cmd += ["--workaround", w]
    return cmd


def run(cmd, json_path, timeout):
    """Runs one contender; its JSON, or {"error": the last line it printed}."""
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"ran past {timeout} s"}
    result = {}
    if os.path.exists(json_path):
        with open(json_path) as f:
            result = json.load(f)
        os.remove(json_path)
    if done.returncode != 0 and "error" not in result:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        result["error"] = lines[-1] if lines else f"exit {done.returncode}"
    return result


def relative_gap(losses, reference):
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference))


class Peers:
    """Runs the contenders and keeps every round's figures, the engine's K = 1 reference losses
    per (model, M), and the workaround each of their schedules needed."""

    def __init__(self, args, tmp):
        self.args, self.tmp = args, tmp
        self.figures = {}  # (side, model, schedule, M) -> one dict per round
        self.references = {}  # (model, M) -> the engine's K = 1 losses
        self.workarounds = {}  # their schedule -> workaround names
        self.errors_before = {}  # their schedule -> the error that asked for the workaround

    def reference(self, model, M):
        if (model, M) not in self.references:
            path = os.path.join(self.tmp, "reference.json")
            r = run(ours_command(self.args, (model, "gpipe", M), path, K=1), path,
                    self.args.timeout)
            if "error" in r:
                sys.exit(f"peers.py: the engine's K=1 reference of {model} failed: {r['error']}")
            self.references[(model, M)] = r["losses"][:self.args.check_steps]
        return self.references[(model, M)]

    def ours(self, cell, distributed=False):
        path = os.path.join(self.tmp, "ours.json")
        r = run(ours_command(self.args, cell, path, distributed=distributed), path,
                self.args.timeout)
        if "error" in r:
            return {"error": r["error"]}
        losses, reference = r["losses"][:self.args.check_steps], self.reference(cell[0], cell[2])
        out = {"step_ms": statistics.median(r["step_seconds"][self.args.check_steps:]) * 1e3,
               "bubble": r.get("bubble_fraction"), "check_relative": relative_gap(losses, reference)}
        if out["check_relative"] > 1e-4:
            out["error"] = f"losses {losses} are not the K=1 run's {reference}"
        return out

    def theirs(self, cell, threads=None):
        schedule = cell[1]
        used = self.workarounds.get(schedule, [])
        r = self.run_theirs(cell, used, threads)
        if "error" in r and not used and schedule in V_SCHEDULES and "[none]" in r["error"]:
            # PyTorch's V schedules send to their own rank while warming up, and Gloo's pair with
            # itself is "not connected (... <--> [none])": a fix on their side.
            self.errors_before[schedule] = r["error"]
            self.workarounds[schedule] = ["self-send"]
            r = self.run_theirs(cell, ["self-send"], threads)
        return r

    def run_theirs(self, cell, workarounds, threads):
        path = os.path.join(self.tmp, "theirs.json")
        r = run(theirs_command(self.args, cell, path, workarounds, threads), path,
                self.args.timeout)
        if "error" in r:
            return {"error": r["error"]}
        return {"step_ms": r["median_step_ms"],
                "check_relative": r.get("check", {}).get("worst_relative")}

    def record(self, key, value):
        self.figures.setdefault(key, []).append(value)
        print(f"  {' '.join(map(str, key))}: " +
              (f"{value['step_ms']:.1f} ms" if "error" not in value
               else f"failed: {value['error']}"), flush=True)


def cells(args):
    """Every (model, schedule, M) cell, each model's naive-2 (GPipe at M = 1) first."""
    return [(model, schedule, M) for model in args.models
            for schedule, M in [("gpipe", 1)] + [(s, M) for s in args.schedules
                                                 for M in args.chunks]]


def run_rounds(peers):
    args = peers.args
    for r in range(args.rounds):
        forward = r % 2 == 0
        print(f"round {r + 1} of {args.rounds}", flush=True)
        for model in args.models:
            for threads in ([1, 2] if forward else [2, 1]):
                cell = (model, f"plain-{threads}", 1)
                peers.record(("theirs",) + cell, peers.theirs(cell, threads))
        measures = {"ours": peers.ours, "ours-distributed": lambda c: peers.ours(c, True),
                    "theirs": peers.theirs}
        sides = args.engine + ["theirs"]
        for cell in (cells(args) if forward else list(reversed(cells(args)))):
            for side in (sides if forward else list(reversed(sides))):
                peers.record((side,) + cell, measures[side](cell))


def median_or_none(values):
    return statistics.median(values) if values else None


def samples_per_s(model, step_ms):
    return MODELS[model]["batch-size"] / (step_ms / 1e3)


def rates(model, runs):
    return [samples_per_s(model, r["step_ms"]) for r in runs if "error" not in r]


def first_error(runs):
    return next((r["error"] for r in runs if "error" in r), "")


def summarize(peers):
    """One row per cell: each side's median samples/s, and for each of the engine's sides the
    median of the rounds' ratios to theirs (each round's ratio of steps run back to back)."""
    rows = []
    for model, schedule, M in cells(peers.args):
        theirs = peers.figures[("theirs", model, schedule, M)]
        row = {"model": model, "schedule": "naive-2" if M == 1 else schedule, "M": M,
               "theirs_samples_per_s": median_or_none(rates(model, theirs)),
               "workaround": ",".join(peers.workarounds.get(schedule, [])),
               "error_before_workaround": peers.errors_before.get(schedule, ""),
               "error_theirs": first_error(theirs)}
        for side in peers.args.engine:
            ours = peers.figures[(side, model, schedule, M)]
            key = side.replace("-", "_")
            ratios = [t["step_ms"] / o["step_ms"] for o, t in zip(ours, theirs)
                      if "error" not in o and "error" not in t]
            row.update({f"{key}_samples_per_s": median_or_none(rates(model, ours)),
                        f"{key}_ratio": median_or_none(ratios), f"{key}_ratio_rounds": ratios,
                        f"{key}_bubble": median_or_none([o["bubble"] for o in ours
                                                         if o.get("bubble") is not None]),
                        f"error_{key}": first_error(ours)})
        rows.append(row)
    return rows


def plain_rows(peers):
    out = []
    for model in peers.args.models:
        for threads in (1, 2):
            runs = peers.figures[("theirs", model, f"plain-{threads}", 1)]
            rates = [samples_per_s(model, r["step_ms"]) for r in runs if "error" not in r]
            out.append({"model": model, "threads": threads,
                        "samples_per_s": median_or_none(rates), "rounds": rates})
    return out


def fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def note_of(row):
    parts = []
    if row["workaround"]:
        parts.append(f"theirs with the {row['workaround']} workaround (without: "
                     f"{row['error_before_workaround']})")
    for side in ENGINE_SIDES + ["theirs"]:
        if row.get("error_" + side.replace("-", "_")):
            parts.append(f"{side} failed: {row['error_' + side.replace('-', '_')]}")
    return "; ".join(parts)


def write_markdown(path, args, rows, plain, seconds):
    with open(path, "w") as f:
        f.write("# This engine against PyTorch's pipelining, the same LibTorch, K=2\n\n")
        f.write(f"Made by `experiments/peers/peers.py {' '.join(sys.argv[1:])}` in "
                f"{seconds / 60:.1f} min on a machine with {os.cpu_count()} hardware threads. "
                "ours: build-torch2's gpipe_train, 2 CPU virtual devices in one process, one "
                "thread each; ours-distributed: the same as 2 processes over Gloo on loopback "
                "(`--distributed`, scripts/launch.sh). Theirs: torch.distributed.pipelining (experiments/peers/theirs.py) "
                "on 2 Gloo ranks on loopback, one thread each. The same layers, balance (the "
                "layers evenly over the stages), batch and SGD, no re-materialisation. Each cell "
                f"ran {args.rounds} rounds, every side back to back (the order reversed "
                "every other round); the ratio is the median of the rounds' ratios of samples/s "
                "(ours / theirs), each round's beside it. Before timing, the losses of the first "
                f"{args.check_steps} steps equal each side's own plain model's at the same M "
                "(relative 1e-4). Naive-2 is GPipe at M=1. Models:\n\n")
        for model in args.models:
            f.write(f"- {model}: " + ", ".join(f"{k} {v}" for k, v in MODELS[model].items()) +
                    f" ({engine_layer_count(model, MODELS[model])} engine layers)\n")
        header = ["model", "schedule", "M", "theirs samples/s"]
        for side in args.engine:
            header += [f"{side} samples/s", f"{side} / theirs", "each round", f"{side} bubble"]
        f.write("\n| " + " | ".join(header + ["note"]) + " |\n|" +
                "|".join("---:" if h not in ("model", "schedule", "each round") else "---"
                         for h in header) + "|---|\n")
        for r in rows:
            cols = [r["model"], r["schedule"], str(r["M"]), fmt(r["theirs_samples_per_s"])]
            for side in args.engine:
                key = side.replace("-", "_")
                cols += [fmt(r[f"{key}_samples_per_s"]), fmt(r[f"{key}_ratio"], 2),
                         ", ".join(fmt(x, 2) for x in r[f"{key}_ratio_rounds"]),
                         fmt(r[f"{key}_bubble"], 3)]
            f.write("| " + " | ".join(cols + [note_of(r)]) + " |\n")
        f.write("\nPyTorch's plain eager loop of the same model (no pipeline, one process):\n\n"
                "| model | threads | samples/s | each round |\n|---|---:|---:|---|\n")
        for p in plain:
            f.write(f"| {p['model']} | {p['threads']} | {fmt(p['samples_per_s'])} | "
                    f"{', '.join(fmt(x) for x in p['rounds'])} |\n")


def failures(rows, plain):
    """Every cell a side could not run or whose losses differed, one line each."""
    out = [f"{r['model']} {r['schedule']} M={r['M']}: {note_of(r)}" for r in rows
           if any(r.get(f"error_{side.replace('-', '_')}") for side in ENGINE_SIDES + ["theirs"])]
    out += [f"{p['model']} plain loop on {p['threads']} thread(s) failed" for p in plain
            if len(p["rounds"]) == 0]
    return out


def write_outputs(args, peers, seconds):
    """Writes the table, its CSV, JSON and plot; returns the failures."""
    rows, plain = summarize(peers), plain_rows(peers)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_markdown(args.out + ".md", args, rows, plain, seconds)
    with open(args.out + ".csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        writer.writeheader()
        for r in rows:
            writer.writerow({k: " ".join(f"{x:.4f}" for x in v) if isinstance(v, list) else v
                             for k, v in r.items()})
    with open(args.out + ".json", "w") as f:
        json.dump({"models": {m: MODELS[m] for m in args.models}, "rounds": args.rounds,
                   "check_steps": args.check_steps, "steps": args.steps, "rows": rows,
                   "plain": plain, "seconds": seconds,
                   "reference_losses": {f"{m}/M{M}": v for (m, M), v in peers.references.items()},
                   "raw": {"|".join(map(str, k)): v for k, v in peers.figures.items()}},
                  f, indent=1)
    # Debian's python3-matplotlib is in the system interpreter, which a pyenv shim may hide.
    drawn = False
    for python in (sys.executable, "/usr/bin/python3"):
        has = subprocess.run([python, "-c", "import matplotlib"], capture_output=True)
        if has.returncode == 0:
            drawn = subprocess.run([python, os.path.join(ROOT, "scripts", "plot_peers.py"),
                                    args.out + ".json", args.out + ".png"]).returncode == 0
            break
    print(f"wrote {args.out}.md, .csv, .json" +
          (" and .png" if drawn else " (no .png: plot_peers.py failed)"), flush=True)
    return failures(rows, plain)


def main():
    args = parse_args()
    start = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        peers = Peers(args, tmp)
        run_rounds(peers)
    failed = write_outputs(args, peers, time.time() - start)
    for line in failed:
        print(f"peers.py: {line}", file=sys.stderr)
    return 1 if failed and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
