#!/usr/bin/env python3
"""Hostile state: what a run trusts besides its flags' values, tried as a hostile user would.

cli.hostile_inputs gives every flag its bad values; this suite gives the programs bad *state*:
output paths that are devices, FIFOs or symlinks, two outputs naming one file, another run's
results, two runs on one snapshot folder, corrupted and edited shards, resumes and ranks whose
settings differ, closed and broken standard output and error. Each case is one row of CASES:
shell run in a fresh folder (setup, then the command), the exit code and the stderr lines it must
give, within its time limit, and a check of what it left (a shell snippet that must exit 0).
The command sees $BIN (the programs), $TRAIN (gpipe_train on a small MLP), and free_port.

  stateful_inputs.py --bin build/bin [--jobs N] [--sample] [--only NAME...] [--list]
                     [--json FILE]    each case's exit code, last stderr line and seconds
  stateful_inputs.py --table BEFORE.json AFTER.json OUT.md
                     the two runs side by side (results/stateful_inputs/: main before this
                     suite's fixes against after)
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

# A small MLP on synthetic data: a step takes milliseconds, a start half a second.
MLP = ("--model mlp --layers 4 --width 32 --in-features 16 --classes 4 --dataset synthetic "
       "--batch-size 8 --chunks 2 --partitions 2 --optimizer sgd --lr 0.05 --seed 3 "
       "--progress off --eval-every -1")

PRELUDE = r"""
set -u
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
"""


def case(family, name, command, code, stderr=(), setup="", check="", limit=60.0, note=""):
    return dict(family=family, name=name, setup=setup, command=command, code=code,
                stderr=list(stderr), check=check, limit=limit, note=note)


# A snapshot folder `ck` of two steps, saved after each.
TWO_SNAPSHOTS = "$TRAIN --steps 2 --save-every 1 --snapshot-dir ck >/dev/null 2>&1"
# Rewrites one byte in the middle of a file, keeping its size (a zip's CRC is left stale).
FLIP_BYTE = ("python3 -c 'import sys; p=sys.argv[1]; b=bytearray(open(p,\"rb\").read()); "
             "b[len(b)//2]^=0xff; open(p,\"wb\").write(b)' ")
# Two ranks of gpipe_train --distributed: rank 0 and rank 1 with their own extra flags.
TWO_RANKS = r"""
port=$(free_port)
two_ranks() {  # FLAGS0 FLAGS1
  RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $TRAIN --distributed --steps 2 \
    --comm-timeout 10 $1 >r0.out 2>r0.err & p0=$!
  RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $TRAIN --distributed --steps 2 \
    --comm-timeout 10 $2 >r1.out 2>r1.err & p1=$!
  wait $p0; c0=$?; wait $p1; c1=$?
  cat r0.err r1.err >&2
  echo "rank 0 exit $c0, rank 1 exit $c1" >&2
  [[ $c0 == 2 && $c1 == 2 ]] && exit 2
  exit 1
}
"""

# gpipe_plan verifying a replicated plan (K=1 x R=2 gpipe_train ranks) in $PWD/tmp; `signal_planner
# SIGNAL` sends SIGNAL once its ranks run and checks that none outlives it.
PLANNER = r"""
alive() { [[ -e /proc/$1 ]] && ! grep -q ') Z' /proc/$1/stat 2>/dev/null; }
signal_planner() {
  mkdir -p tmp
  TMPDIR=$PWD/tmp $BIN/gpipe_plan --model mlp --layers 4 --width 32 --batch-size 8 \
    --max-chunks 2 --devices 4 --grid "K=1,R=2,M=2" --json plan.json >plan.log 2>&1 &
  planner=$!
  for _ in $(seq 3000); do ranks=$(pgrep -P $planner | tr '\n' ' '); [[ -n $ranks ]] && break; sleep 0.01; done
  [[ -n $ranks ]] || { echo "no rank started: $(tail -2 plan.log)" >&2; exit 5; }
  sleep 0.1
  ranks=$(pgrep -P $planner | tr '\n' ' ')
  kill -"$1" $planner; wait $planner; code=$?
  sleep 0.3
  for r in $ranks; do alive $r && { echo "rank $r outlived the planner" >&2; exit 6; }; done
  echo "planner ended by SIG$1 (exit $code) with rank(s) $ranks running; none outlived it" >&2
}
"""

# Four generated JPEGs in ImageNet's layout, one of them cut at 3000 bytes.
TRUNCATED_JPEG = ("$BIN/dataset_info --generate-jpegs gen --count 4 --classes 2 >/dev/null 2>&1 && "
                  "truncate -s 3000 gen/train/n00000000/n00000000_000000.JPEG")

# A stranger connects to the store at $port and holds a half-sent query for 20 s.
STRANGER = r"""
port=$(free_port)
stranger() {
  python3 - "$port" <<'PY' & stranger_pid=$!
import socket, sys, time
for _ in range(200):
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
        break
    except OSError:
        time.sleep(0.02)
s.sendall(b"\x01\x00")
time.sleep(20)
PY
  sleep 0.5
}
trap 'kill $stranger_pid 2>/dev/null' EXIT
"""

# gpipe_plan on the same MLP within a budget every plan fits.
PLAN = "$BIN/gpipe_plan " + MLP.replace("--progress off ", "") + " --memory-per-device 1GiB"

CASES = [
    # --- paths: what a run writes must be a new name or a regular file -----------------------
    case("paths", "json_char_device", "$TRAIN --steps 1 --json dev", 2,
         ["'dev' is a character device"],
         setup="mknod dev c 1 3", check="[[ -c dev ]]",
         note="a copy of /dev/null made with mknod; it used to become a regular file"),
    case("paths", "metrics_full_device", "$TRAIN --steps 1 --metrics full", 2,
         ["'full' is a character device"], setup="mknod full c 1 7",
         check="[[ -c full ]]"),
    case("paths", "trace_symlink_to_stdout", "set -o pipefail; $TRAIN --steps 1 --trace out.json | cat", 2,
         ["'out.json' is a FIFO"], setup="ln -s /proc/self/fd/1 out.json",
         check="[[ -L out.json ]]", note="the pipe behind the link is a FIFO"),
    case("paths", "metrics_fifo", "$TRAIN --steps 1 --metrics m", 2, ["'m' is a FIFO"],
         setup="mkfifo m", check="[[ -p m ]]", limit=20),
    case("paths", "json_dangling_symlink", "$TRAIN --steps 1 --json j", 2,
         ["symlink to nothing"], setup="ln -s nowhere/x j", check="[[ -L j ]]"),
    case("paths", "json_and_metrics_one_file", "$TRAIN --steps 1 --json a.json --metrics ./a.json",
         2, ["--metrics and --json name the same file"], check="[[ ! -e a.json ]]"),
    case("paths", "json_name_too_long", "$TRAIN --steps 1 --json $(printf 'x%.0s' $(seq 5000))", 2,
         ["characters"], limit=10),
    case("paths", "metrics_write_fails", "ulimit -f 2; $TRAIN --steps 200 --metrics m.jsonl", 1,
         ["'m.jsonl' failed: File too large"], note="ulimit -f stands in for a full disk"),
    case("paths", "output_dir_of_another_run", "$TRAIN --steps 1 --output-dir out", 2,
         ["--output-dir 'out' holds the results of another run", "--overwrite-results"],
         setup="$TRAIN --steps 2 --output-dir out >/dev/null 2>&1 && echo x >out/RUN.md && "
               "md5sum out/* >before.md5",
         check="md5sum -c --quiet before.md5"),
    case("paths", "output_dir_overwrite_results",
         "$TRAIN --steps 1 --output-dir out --overwrite-results", 0,
         setup="$TRAIN --steps 2 --output-dir out >/dev/null 2>&1 && echo x >out/RUN.md",
         check="[[ ! -e out/RUN.md ]] && [[ $(grep -c loss out/metrics.jsonl) == 1 ]]"),
    case("paths", "resume_of_a_finished_run_keeps_its_results",
         "$TRAIN --steps 2 --snapshot-dir ck --output-dir out --resume", 0,
         ["the run had already finished"],
         setup="$TRAIN --steps 2 --snapshot-dir ck --output-dir out >/dev/null 2>&1 && "
               "md5sum out/summary.json out/metrics.jsonl >before.md5",
         check="md5sum -c --quiet before.md5"),
    case("paths", "resume_appends_to_its_own_results",
         "$TRAIN --steps 4 --save-every 1 --snapshot-dir ck --output-dir out --resume", 0,
         setup="$TRAIN --steps 2 --save-every 1 --snapshot-dir ck --output-dir out >/dev/null 2>&1",
         check="[[ $(grep -c '\"loss\"' out/metrics.jsonl) == 4 ]]"),
    # --- FIFOs where a file is read: refused at once, never a hang -------------------------
    case("fifos", "config_fifo", "$TRAIN --config c.toml", 2, ["'c.toml' is a FIFO"],
         setup="mkfifo c.toml", limit=20),
    case("fifos", "labels_file_fifo",
         "$BIN/dataset_info --dataset imagenet --data-dir data --split test --labels-file l.txt", 2,
         ["is a FIFO"], setup="mkdir -p data/train/n01 data/val && mkfifo l.txt && "
                               "printf 'x' >data/val/a.JPEG && printf 'x' >data/train/n01/a.JPEG",
         limit=20),
    case("fifos", "cifar_records_fifo", "$BIN/dataset_info --dataset cifar10 --data-dir c", 2,
         ["CIFAR file 'c/cifar-10-batches-bin/data_batch_1.bin' is a FIFO"],
         setup="mkdir -p c/cifar-10-batches-bin && for f in data_batch_1 data_batch_2 "
               "data_batch_3 data_batch_4 data_batch_5 test_batch; do "
               "mkfifo c/cifar-10-batches-bin/$f.bin; done", limit=20),
    case("fifos", "manifest_fifo", "$TRAIN --steps 3 --snapshot-dir ck --resume", 0,
         ["snapshot manifest", "is a FIFO", "resumed from ck/step-00000001 "],
         setup=TWO_SNAPSHOTS + " && rm ck/step-00000002/manifest.json && "
               "mkfifo ck/step-00000002/manifest.json", limit=30),
    case("fifos", "shard_fifo", "$TRAIN --steps 3 --snapshot-dir ck --resume", 0,
         ["stage-1.pt", "is a FIFO", "resumed from ck/step-00000001 "],
         setup=TWO_SNAPSHOTS + " && rm ck/step-00000002/stage-1.pt && "
               "mkfifo ck/step-00000002/stage-1.pt", limit=30),
    case("fifos", "latest_fifo", "$TRAIN --steps 3 --snapshot-dir ck --resume", 2,
         ["'ck/latest' is a FIFO"], setup=TWO_SNAPSHOTS + " && rm ck/latest && mkfifo ck/latest",
         limit=30),
    case("fifos", "cache_fifo", PLAN + " --cache c.json --top 1", 2, ["'c.json' is a FIFO"],
         setup="mkfifo c.json", limit=30),
    case("fifos", "cache_not_a_cache", PLAN + " --cache notes.txt --top 1", 2,
         ["'notes.txt' is not a gpipe cost cache"], setup="echo 'my notes' >notes.txt",
         check="[[ $(cat notes.txt) == 'my notes' ]]", limit=30),
    case("fifos", "cache_of_a_list", PLAN + " --cache c.json --top 1", 2,
         ["'c.json' is not a gpipe cost cache (JSON but not an object)"],
         setup="echo '[1,2,3]' >c.json", check="[[ $(cat c.json) == '[1,2,3]' ]]", limit=30,
         note="it ended in a raw JSON-library error after planning"),
    case("paths", "tmpdir_missing", "TMPDIR=$PWD/none " + PLAN + " --top 1 --verify 1", 2,
         ["--verify needs a temporary folder", "set TMPDIR"], limit=30,
         note="it failed in temp_directory_path after planning"),
    # --- snapshots: one writer, checksummed shards, settings kept --------------------------
    case("snapshots", "two_resumes_on_one_folder", r"""
cp -r ck alone
GPIPE_FAULT_INJECT=slow-save $TRAIN --steps 40 --save-every 1 --snapshot-dir ck --resume \
  >/dev/null 2>first.err & first=$!
for _ in $(seq 1 600); do grep -qs "resumed from" first.err && break; sleep 0.05; done
start=$(date +%s.%N)
$TRAIN --steps 40 --save-every 1 --snapshot-dir ck --resume --lr 0.2; code=$?
echo "second run: $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }') s" >&2
wait $first || exit 9
GPIPE_FAULT_INJECT=slow-save $TRAIN --steps 40 --save-every 1 --snapshot-dir alone --resume \
  >/dev/null 2>&1 || exit 9
diff -r --exclude=.lock ck alone >&2 || exit 8
exit $code""", 2, ["--snapshot-dir 'ck' is in use by process"], setup=TWO_SNAPSHOTS,
         note="the second exits 2 at once; the first's chain equals the same run alone, byte "
              "for byte"),
    case("snapshots", "edited_shard_falls_back", "$TRAIN --steps 3 --snapshot-dir ck --resume", 0,
         ["step-00000002/stage-0.pt' does not match its checksum",
          "resumed from ck/step-00000001 "],
         setup=TWO_SNAPSHOTS + " && " + FLIP_BYTE + "ck/step-00000002/stage-0.pt"),
    case("snapshots", "edited_only_shard", "$TRAIN --steps 3 --snapshot-dir ck --resume", 2,
         ["stage-1.pt' does not match its checksum", "no valid snapshot"],
         setup="$TRAIN --steps 1 --snapshot-dir ck >/dev/null 2>&1 && " + FLIP_BYTE +
               "ck/step-00000001/stage-1.pt"),
    case("snapshots", "shard_added", "$TRAIN --steps 3 --snapshot-dir ck --resume", 0,
         ["stage-7.pt' is not listed in the snapshot's manifest"],
         setup=TWO_SNAPSHOTS + " && cp ck/step-00000002/stage-0.pt ck/step-00000002/stage-7.pt"),
    case("snapshots", "resume_with_other_settings",
         "$TRAIN --steps 3 --snapshot-dir ck --resume --lr 0.2 --seed 9 --optimizer rmsprop", 2,
         ["--lr 0.2 (the snapshot's: 0.05)", "--seed 9 (the snapshot's: 3)",
          "--optimizer rmsprop (the snapshot's: sgd)", "--finetune-from"],
         setup=TWO_SNAPSHOTS, check="[[ $(cat ck/latest) == step-00000002 ]]"),
    case("snapshots", "resume_with_another_batch",
         "$TRAIN --steps 3 --snapshot-dir ck --resume --batch-size 16", 2,
         ["--batch-size 16 (the snapshot's: 8)"], setup=TWO_SNAPSHOTS),
    case("snapshots", "resume_may_reshard",
         "$TRAIN --steps 3 --snapshot-dir ck --resume --partitions 1 --chunks 4", 0,
         ["resumed from ck/step-00000002 "], setup=TWO_SNAPSHOTS),
    # --- ranks: every rank trains the same run -----------------------------------------------
    case("ranks", "balance_differs", "two_ranks '--balance 2,3' '--balance 1,4'", 2,
         ["--balance: 1,4 on rank 1, 2,3 on rank 0", "rank 0 exit 2, rank 1 exit 2"],
         limit=20, note="both ranks exit 2 well within --comm-timeout 10 (seconds in the JSON; "
                        "the limit leaves room for sanitizer builds' starts)"),
    case("ranks", "seed_and_lr_differ",
         "two_ranks '--balance 2,3 --seed 1' '--balance 2,3 --seed 2 --lr 0.1'", 2,
         ["--seed: 1 on rank 0, 2 on rank 1", "--lr: 0.05 on rank 0, 0.1 on rank 1"], limit=20),
    case("ranks", "rank_0_dies_beside_a_stranger", STRANGER + r"""
for rank in 0 1; do
  RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $TRAIN --distributed \
    --balance 2,3 --steps 1000000 --comm-timeout 5 >r$rank.out 2>r$rank.err &
  pids[$rank]=$!
done
for _ in $(seq 400); do grep -qs "data:" r0.err && break; sleep 0.05; done
sleep 1
stranger
kill -9 ${pids[0]}
wait ${pids[1]}; code=$?
cat r1.err >&2
exit $code""", 1, ["rank 0 (device 0, replica 0) was lost"], limit=25,
         note="rank 1 used to end in std::terminate (exit 134)"),
    case("ranks", "port_taken_by_another_server", r"""
port=$(free_port)
python3 -m http.server "$port" --bind 127.0.0.1 >/dev/null 2>&1 & server=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.05; done
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $TRAIN --distributed --balance 2,3 \
  --steps 1 --comm-timeout 3; code=$?
kill $server
exit $code""", 1, ["rank 1 cannot reach the master"], limit=8,
         note="an HTTP server holds MASTER_PORT; it used to take 30-60 s at --comm-timeout 3"),
    case("ranks", "stranger_stalls_the_store", STRANGER + r"""
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $TRAIN --distributed \
  --balance 2,3 --steps 2 --comm-timeout 4 >r0.out 2>r0.err & p0=$!
stranger
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port $TRAIN --distributed \
  --balance 2,3 --steps 2 --comm-timeout 4 >r1.out 2>r1.err & p1=$!
wait $p0; c0=$?; wait $p1; c1=$?
cat r0.err r1.err >&2
echo "rank 0 exit $c0, rank 1 exit $c1" >&2
[[ $c0 -le 1 && $c1 -le 1 ]] || exit 3
exit $(( c0 | c1 ))""", 1, ["rank 0 cannot host the rendezvous store at",
                              "rank 0 exit 1, rank 1 exit 1"],
         limit=12, note="a client holding a half-sent query stalls c10d's store: every rank exits 1 "
                        "at --comm-timeout 4, none aborts"),
    case("ranks", "rank_wraps_around",
         "RANK=4294967296 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) "
         "$TRAIN --distributed --steps 1", 2, ["RANK=4294967296 is not an integer in [0, "],
         note="it used to wrap around to rank 0"),
    case("ranks", "master_addr_with_port",
         "RANK=0 WORLD_SIZE=1 MASTER_ADDR=127.0.0.1:29500 MASTER_PORT=$(free_port) "
         "$TRAIN --distributed --partitions 1 --steps 1", 2,
         ["MASTER_ADDR='127.0.0.1:29500' holds a ':'"]),
    # --- signals: a planner's ranks end with it -----------------------------------------------
    case("signals", "sigterm_to_planner_verifying",
         PLANNER + 'signal_planner TERM\n[[ -z $(ls -A tmp) ]] || { echo "left: $(ls -A tmp)" >&2; '
         'exit 7; }\nexit $code', 143, ["none outlived it"], limit=180,
         note="its ranks used to run on under PID 1, and its temporary folder stayed"),
    case("signals", "sigkill_to_planner_verifying", PLANNER + "signal_planner KILL\nexit $code",
         137, ["none outlived it"], limit=180,
         note="PR_SET_PDEATHSIG: the ranks die with it even when it cannot clean up"),
    # --- data: a file cut short is a bad image ---------------------------------------------------
    case("data", "truncated_jpeg", "$BIN/dataset_info --dataset imagenet --data-dir gen", 2,
         ["n00000000_000000.JPEG (3000 bytes): it is truncated"],
         setup=TRUNCATED_JPEG,
         note="it decoded partly and trained without a warning"),
    case("data", "truncated_jpeg_skipped",
         "$BIN/dataset_info --dataset imagenet --data-dir gen --skip-bad", 0,
         ["(3000 bytes): it is truncated", "1 skipped"],
         setup=TRUNCATED_JPEG),
    # --- standard output and error -------------------------------------------------------------
    case("streams", "stdout_closed", "$BIN/gpipe_sim -K 2 -M 4 --json sim.json >&-", 1,
         ["cannot write standard output: it is closed"], check="[[ -s sim.json ]]"),
    case("streams", "stdout_broken_pipe", r"""
python3 - "$BIN" <<'PY'
import os, subprocess, sys
read, write = os.pipe()
os.close(read)  # the reader is gone before the first write
code = subprocess.run([sys.argv[1] + "/gpipe_sim", "-K", "2", "-M", "4", "--draw", "--json",
                       "sim.json"], stdout=write).returncode
sys.exit(code)
PY""", 1, ["cannot write standard output"], check="[[ -s sim.json ]]"),
    case("streams", "dataset_info_stdout_closed",
         "$BIN/dataset_info --dataset synthetic --count 8 >&-", 1,
         ["cannot write standard output"]),
    case("streams", "stderr_closed_bad_flag", "$BIN/gpipe_sim -K x 2>&-", 2),
    case("streams", "stderr_closed_run", "$BIN/gpipe_sim -K 2 -M 4 --json sim.json 2>&-", 0,
         check="[[ -s sim.json ]]"),
]


def last_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    return lines[-1] if lines else ""


def telling_line(text, needles):
    """The stderr line that tells what happened: the first holding an expected text, else the
    last error or warning, else the last line."""
    lines = [l for l in text.strip().splitlines() if l.strip()]
    for needle in needles:
        for line in lines:
            if needle in line:
                return line
    for line in reversed(lines):
        if "error" in line or "warn" in line or "terminate" in line:
            return line
    return lines[-1] if lines else ""


def run_case(c, bin_dir):
    work = tempfile.mkdtemp(prefix="gpipe_stateful_")
    env = dict(os.environ, BIN=bin_dir, TRAIN=f"{bin_dir}/gpipe_train {MLP}",
               OMP_NUM_THREADS="1")
    start = time.monotonic()
    problems = []
    try:
        if c["setup"]:
            s = subprocess.run(["bash", "-c", PRELUDE + c["setup"]], cwd=work, env=env,
                               capture_output=True, text=True, timeout=120)
            if s.returncode != 0:
                return [f"setup failed ({s.returncode}): {s.stderr.strip()[-300:]}"], 0.0, {}
        script = PRELUDE + (TWO_RANKS if c["family"] == "ranks" else "") + c["command"]
        start = time.monotonic()
        # A session of its own, so that a case past its limit ends with everything it started.
        process = subprocess.Popen(["bash", "-c", script], cwd=work, env=env, text=True,
                                   errors="replace", stdin=subprocess.DEVNULL,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   start_new_session=True)
        try:
            stdout, stderr = process.communicate(timeout=c["limit"])
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            _, stderr = process.communicate()
            return ([f"still running after {c['limit']} s (blocked?)"], c["limit"],
                    {"exit": "none: still running after the limit",
                     "stderr": last_line(stderr), "seconds": c["limit"]})
        r = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        seconds = time.monotonic() - start
        seen = {"exit": r.returncode, "stderr": telling_line(r.stderr, c["stderr"]),
                "seconds": round(seconds, 1)}
        if r.returncode != c["code"]:
            problems.append(f"exit {r.returncode}, expected {c['code']}")
        for needle in c["stderr"]:
            if needle not in r.stderr:
                problems.append(f"stderr lacks {needle!r}")
        if "Traceback" in r.stderr or "terminate called" in r.stderr:
            problems.append("a crash on stderr")
        if c["check"]:
            k = subprocess.run(["bash", "-c", PRELUDE + c["check"]], cwd=work, env=env,
                               capture_output=True, text=True)
            if k.returncode != 0:
                problems.append(f"check failed: {c['check']} {k.stderr.strip()[-200:]}")
        if problems:
            problems.append("stderr: " + r.stderr.strip()[-600:].replace("\n", " | "))
        return problems, seconds, seen
    finally:
        shutil.rmtree(work, ignore_errors=True)


def write_table(before_path, after_path, out_path):
    before, after = json.load(open(before_path)), json.load(open(after_path))
    cell = lambda text: text.replace("|", "\\|")[:220]
    lines = ["| family | case | command | before: exit, last stderr line | after: exit, last "
             "stderr line |", "|---|---|---|---|---|"]
    for c in CASES:
        b, a = before.get(c["name"], {}), after.get(c["name"], {})
        command = cell(" ".join(c["command"].split()))[:160]
        lines.append(f"| {c['family']} | {c['name']} | `{command}` | {b.get('exit', '-')}: "
                     f"{cell(b.get('stderr', ''))} | {a.get('exit', '-')}: "
                     f"{cell(a.get('stderr', ''))} |")
    with open(out_path, "w") as out:
        out.write("\n".join(lines) + "\n")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", help="folder of the programs (build/bin)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=[], help="run only these cases")
    parser.add_argument("--sample", action="store_true",
                        help="the first two cases of each family (builds whose starts are slow)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--json", help="write each case's exit code, stderr line and seconds")
    parser.add_argument("--table", nargs=3, metavar=("BEFORE", "AFTER", "OUT"),
                        help="write two --json runs side by side as Markdown")
    args = parser.parse_args()
    if args.table:
        return write_table(*args.table)
    if not args.bin:
        parser.error("--bin is required")
    cases = [c for c in CASES if not args.only or c["name"] in args.only]
    if args.sample:
        families = [c["family"] for c in cases]
        cases = [c for i, c in enumerate(cases) if families[:i].count(c["family"]) < 2]
    if args.list:
        for c in cases:
            print(f"{c['family']:10} {c['name']:45} exit {c['code']}  {c['note']}")
        return 0
    missing = [n for n in args.only if n not in {c["name"] for c in CASES}]
    if missing:
        print(f"stateful_inputs.py: unknown case(s) {missing}", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("stateful_inputs.py: mknod needs root; the device cases will fail", file=sys.stderr)
    bin_dir = os.path.abspath(args.bin)
    start = time.monotonic()
    failed = 0
    results = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = {pool.submit(run_case, c, bin_dir): c for c in cases}
        for future in concurrent.futures.as_completed(futures):
            c = futures[future]
            problems, seconds, seen = future.result()
            results[c["name"]] = dict(seen, family=c["family"], passed=not problems)
            status = "FAIL" if problems else "ok"
            print(f"{status:4} {c['family']:10} {c['name']:45} {seconds:5.1f} s", flush=True)
            for p in problems:
                print(f"       {p}", flush=True)
            failed += bool(problems)
    print(f"{len(cases)} cases in {time.monotonic() - start:.0f} s")
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results, out, indent=1)
    print(f"stateful_inputs: {len(cases) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
