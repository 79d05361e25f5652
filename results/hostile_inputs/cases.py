#!/usr/bin/env python3
"""Issue 46's hostile inputs, each re-run as the issue gave it: exit code, time, peak memory, stderr.

Why this exists: the issue listed about forty inputs that a new user could make and that went
wrong (silent data loss, unbounded sizes, overflow, values taken silently, checks after the
work). The table-driven test cli.hostile_inputs keeps every flag's bad values refused; this
script keeps the issue's own commands, in its numbering, with what each now does, so a reader
can compare the two. Each case runs in a fresh empty folder (its setup commands first, their
output not shown), under a 4 GiB address-space limit and a 60 s timeout.

Usage (from the repository root): results/hostile_inputs/cases.py [--bin build/bin] > cases.md
"""
import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

# (issue's case, what it is, setup commands, the command, files to write first, a command whose
# output shows the folder afterwards). $B is the programs' folder.
TRAIN_SNAP = "$B/gpipe_train --snapshot-dir D --save-every 1 --batch-size 8"
CASES = [
    ("1", "a second run in another run's snapshot folder",
     [TRAIN_SNAP + " --steps 6"], TRAIN_SNAP + " --steps 2 --seed 1", {}, "cat D/latest; ls D"),
    ("1", "the same with another --width",
     [TRAIN_SNAP + " --steps 6"], TRAIN_SNAP + " --steps 2 --width 32", {}, "cat D/latest; ls D"),
    ("1", "pruning after --overwrite-snapshots keeps only this run's",
     [TRAIN_SNAP + " --steps 6"],
     TRAIN_SNAP + " --steps 3 --seed 1 --overwrite-snapshots --keep-snapshots 2", {},
     "cat D/latest; ls D"),
    ("2", "K of a billion", [], "$B/gpipe_sim -K 1000000000 -M 1", {}, ""),
    ("2", "M of a billion", [], "$B/gpipe_sim -K 2 -M 1e9", {}, ""),
    ("2", "K x v x M past the simulator's bound", [], "$B/gpipe_sim -K 4096 -M 4096", {}, ""),
    ("2", "a billion layers", [],
     "$B/model_info --model transformer-l --layers 1000000000", {}, ""),
    ("2", "the largest Transformer the bounds let through", [],
     "$B/gpipe_train --model transformer-l --layers 4096 --d-model 65536", {}, ""),
    ("2", "the same, planned", [],
     "$B/gpipe_plan --model transformer-l --layers 4096 --d-model 65536", {}, ""),
    ("2", "the widest AmoebaNet-D the bounds let through", [],
     "$B/gpipe_train --model amoebanet-d --filters 65536", {}, ""),
    ("2", "a trillion images", [], "$B/dataset_info --count 1e12", {}, ""),
    ("2", "a million loader workers", [], "$B/dataset_info --workers 1000000", {}, ""),
    ("2", "a million loader workers (trainer)", [], "$B/gpipe_train --workers 1000000", {}, ""),
    ("3", "a batch past int64", [], "$B/gpipe_train --batch-size 99999999999999999999", {}, ""),
    ("3", "the same in a TOML file", [], "$B/gpipe_train --config big.toml",
     {"big.toml": "batch-size = 99999999999999999999\n"}, ""),
    ("3", "parameters past int64", [],
     "$B/model_info --model transformer-l --d-model 1000000000 --layers 2", {}, ""),
    ("4", "the default MLP on images", [], "$B/gpipe_train --dataset fashion-mnist --steps 1", {},
     ""),
    ("5", "-K -1", [], "$B/gpipe_train -K -1", {}, ""),
    ("5", "--virtual-stages -2", [], "$B/gpipe_train --virtual-stages -2", {}, ""),
    ("5", "--workers -1", [], "$B/gpipe_train --workers -1", {}, ""),
    ("5", "--eval-every -7", [], "$B/gpipe_train --eval-every -7", {}, ""),
    ("5", "--eval-batch-size -5", [], "$B/gpipe_train --eval-batch-size -5", {}, ""),
    ("5", "--balance 2,,2", [], "$B/gpipe_train --balance 2,,2", {}, ""),
    ("5", "--devices ''", [], "$B/gpipe_train --devices ''", {}, ""),
    ("5", "a TOML list for a one-value key", [], "$B/gpipe_train --config a.toml",
     {"a.toml": "steps = [1, 2]\n"}, ""),
    ("5", "a TOML key given twice", [], "$B/gpipe_train --config b.toml",
     {"b.toml": "steps = 1\nbatch-size = 8\nsteps = 2\n"}, ""),
    ("5", "gpipe_sim -K 0", [], "$B/gpipe_sim -K 0", {}, ""),
    ("5", "latency nan", [], "$B/gpipe_sim --link-latency-us nan", {}, ""),
    ("5", "latency -5", [], "$B/gpipe_sim --link-latency-us -5", {}, ""),
    ("5", "latency inf", [], "$B/gpipe_sim --link-latency-us inf", {}, ""),
    ("5", "bandwidth nan", [], "$B/gpipe_sim --link-bandwidth-gbs nan", {}, ""),
    ("5", "bandwidth 0", [], "$B/gpipe_sim --link-bandwidth-gbs 0", {}, ""),
    ("5", "bandwidth -5", [], "$B/gpipe_sim --link-bandwidth-gbs -5", {}, ""),
    ("5", "accuracy_table --tolerance nan", [], "$B/accuracy_table --tolerance nan", {}, ""),
    ("5", "--plan auto beside --balance", [], "$B/gpipe_train --plan auto --balance 2,2", {}, ""),
    ("6", "--json naming a folder", [], "mkdir F && $B/gpipe_train --steps 2 --json F", {},
     "ls -A F"),
    ("6", "--trace under a missing folder", [],
     "$B/gpipe_train --steps 2 --trace nowhere/t.json", {}, "ls -A"),
    ("6", "a manifest edited to step -7, then --resume", [TRAIN_SNAP + " --steps 3",
     "sed -i 's/\"step\": *3/\"step\": -7/' D/step-00000003/manifest.json"],
     TRAIN_SNAP + " --steps 4 --resume", {}, "cat D/latest; ls D"),
    ("7", "a TOML file of binary bytes", [], "$B/gpipe_train --config g.toml",
     {"g.toml": b"\x01\xff\xfe\x1b[31m = 2\n"}, ""),
    ("7", "model_info's errors go to stderr", [], "$B/model_info --layers 0", {}, ""),
    ("7", "dataset_info --count 0", [], "$B/dataset_info --count 0", {}, ""),
]

# The cases that must succeed, and the stderr lines that show how (a regular expression); every
# other case must end with exit 2 and one line on stderr.
SUCCEEDS = {
    "pruning after --overwrite-snapshots keeps only this run's": "overwrite-snapshots|saved",
    "a manifest edited to step -7, then --resume": "unusable|resum",
}


def limit():
    size = 4 * 1024**3
    resource.setrlimit(resource.RLIMIT_AS, (size, size))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def run(command, folder, bin_dir, timeout=60):
    """(exit code, seconds, peak MiB, stdout, stderr) of one shell command in the folder; the
    peak is the largest resident size of the command's processes (wait4's rusage)."""
    env = dict(os.environ, B=bin_dir)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.monotonic()
        process = subprocess.Popen(["bash", "-c", command], cwd=folder, env=env, stdout=out,
                                   stderr=err, preexec_fn=limit)
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() - start > timeout:
                process.kill()
            time.sleep(0.005)
        seconds = time.monotonic() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return (process.returncode, seconds, usage.ru_maxrss / 1024,
                out.read().decode(errors="replace"), err.read().decode(errors="replace"))


def cell(text):
    return text.replace("|", "\\|").replace("\n", " / ").strip()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bin", default="build/bin")
    args = parser.parse_args()
    bin_dir = os.path.abspath(args.bin)
    print("# Issue 46's cases, re-run (`results/hostile_inputs/cases.py`)\n")
    print("Each command ran in an empty folder (`$B` is build/bin), after the setup commands "
          "named, under `ulimit -v` 4 GiB. *exit*: its exit code; *s*: wall seconds; *peak MiB*: "
          "the command's largest resident size; *stderr lines*: how many, then the line (or the "
          "lines that tell, for a case that must succeed), without the log's clock; *after*: the "
          "folder afterwards, where the case is about files. A case that must succeed says so "
          "(*expected*); every other must end with exit 2 and one line on stderr.\n")
    print("| case | what | command | exit | s | peak MiB | stderr lines | stderr | after |\n"
          "|---|---|---|---:|---:|---:|---:|---|---|")
    failed = 0
    for number, what, setup, command, files, after in CASES:
        with tempfile.TemporaryDirectory() as folder:
            for name, text in files.items():
                with open(os.path.join(folder, name), "wb") as f:
                    f.write(text if isinstance(text, bytes) else text.encode())
            for step in setup:
                code = run(step, folder, bin_dir)[0]
                if code != 0:
                    sys.exit(f"setup of case {number} ({what}) failed: {step} exit {code}")
            code, seconds, peak, out, err = run(command, folder, bin_dir)
            shown = run(after, folder, bin_dir)[3] if after else ""
        lines = [re.sub(r"^\[[0-9:. -]+\] ", "", line) for line in err.strip().splitlines()]
        if what in SUCCEEDS:
            failed += code != 0
            shown_lines = [line for line in lines if re.search(SUCCEEDS[what], line)]
            number += " (expected: exit 0)"
        else:
            failed += code != 2 or len(lines) != 1 or bool(out)
            shown_lines = lines[-1:]
        steps = "".join(f"{step}; " for step in setup)
        print(f"| {number} | {what} | `{cell(steps + command)}` | {code} | {seconds:.2f} | "
              f"{peak:.0f} | {len(lines)} | {cell(chr(10).join(shown_lines))} | {cell(shown)} |")
    print(f"\n{len(CASES)} cases, {failed} not ending as expected.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
