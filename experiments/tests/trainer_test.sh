#!/usr/bin/env bash
# trainer_test.sh CASE BIN_DIR: one behaviour of gpipe_train end to end, on the real
# Fashion-MNIST with a tiny AmoebaNet-D (BatchNorm, dropout and drop-path on, so equal losses
# mean equal randomness and statistics too). Passes (exit 0) or says what differed.
set -uo pipefail
case_name=$1
bin=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

base=(--model amoebanet-d --layers 3 --filters 16 --image-size 28 --dataset fashion-mnist
      --batch-size 32 --chunks 2 --workers 1 --dropout 0.2 --drop-path 0.1 --eval-every -1
      --progress off --optimizer rmsprop --lr 0.01 --seed 5)
train() { "$bin/gpipe_train" "${base[@]}" "$@"; }
fail() { echo "FAIL: $*"; exit 1; }

# same_run A.json B.json TOLERANCE: equal losses and parameter checksum.
same_run() {
  python3 - "$1" "$2" "$3" <<'PY' || exit 1
import json, sys
a, b, tol = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
la, lb = a["losses"], b["losses"]
assert len(la) == len(lb), f"{len(la)} vs {len(lb)} losses"
worst = max(abs(x - y) for x, y in zip(la, lb))
assert worst <= tol, f"losses differ by {worst}: {la} vs {lb}"
ca, cb = a["param_checksum"], b["param_checksum"]
assert abs(ca - cb) <= tol * max(1.0, abs(ca)), f"checksums {ca} vs {cb}"
print(f"same losses (max diff {worst:.2e}) and checksum {ca:.9f}")
PY
}

case "$case_name" in
  resume)
    # 4 steps straight == 2 steps, stop, resume to 4.
    train --balance 5,4 --steps 4 --json straight.json >/dev/null 2>&1 || fail "straight run"
    train --balance 5,4 --steps 2 --snapshot-dir ck --json first.json 2>/dev/null || fail "first half"
    train --balance 5,4 --steps 4 --snapshot-dir ck --resume --json resumed.json 2>resume.log ||
      fail "resume: $(tail -3 resume.log)"
    grep -q "resumed from" resume.log || fail "no 'resumed from' line"
    same_run straight.json resumed.json 0
    ;;
  resume_fp16)
    # fp16 with its loss scaler: an overflow in the second step (injected; the first may overflow
    # by itself at the initial scale) skips it and halves the scale; 4 steps straight == 2 steps,
    # stop, resume to 4, the resumed run continuing at the saved scale. LibTorch 1.13 cannot
    # compute fp16 on the CPU: there the refusal is what is checked.
    if ! train --precision fp16 --steps 1 >/dev/null 2>probe.log; then
      grep -q "needs LibTorch 2.x" probe.log || fail "fp16 refused without saying why: $(tail -2 probe.log)"
      echo "fp16 refused by this LibTorch, naming the 2.x build (checked)"
      exit 0
    fi
    export GPIPE_FAULT_INJECT=overflow-step-1
    fp16=(--precision fp16 --balance 5,4)
    train "${fp16[@]}" --steps 4 --json straight.json --metrics straight.jsonl >/dev/null 2>&1 ||
      fail "straight run"
    train "${fp16[@]}" --steps 2 --snapshot-dir ck >/dev/null 2>&1 || fail "first half"
    train "${fp16[@]}" --steps 4 --snapshot-dir ck --resume --json resumed.json \
      --metrics resumed.jsonl 2>resume.log >/dev/null || fail "resume: $(tail -3 resume.log)"
    same_run straight.json resumed.json 0
    python3 - <<'PY' || fail "loss scales differ"
import json
steps = lambda f: [r for r in map(json.loads, open(f)) if "loss_scale" in r]
straight, resumed = steps("straight.jsonl"), steps("resumed.jsonl")
scales = [r["loss_scale"] for r in straight]
assert straight[1]["skipped"] and scales[2] == scales[1] / 2, scales  # the injected overflow
saved = json.load(open("ck/step-00000002/manifest.json"))["loss_scale"]
assert saved["scale"] == scales[2] and saved["skipped_steps"] >= 1, (saved, scales)
assert [r["loss_scale"] for r in resumed] == scales[2:], (resumed, scales)
print("loss scale per step", scales, "; saved", saved, "; resumed",
      [r["loss_scale"] for r in resumed])
PY
    ;;
  placement)
    # Where the layers run changes no arithmetic: two balances at K=2, and K=1, train bit for
    # bit alike (losses and parameter checksum), BatchNorm, dropout and drop-path included.
    train --balance 5,4 --steps 4 --json a.json >/dev/null 2>a.log || fail "balance 5,4: $(tail -2 a.log)"
    train --balance 2,7 --steps 4 --json b.json >/dev/null 2>&1 || fail "balance 2,7"
    train --partitions 1 --threads-per-device 1 --steps 4 --json k1.json >/dev/null 2>&1 ||
      fail "K=1"
    same_run a.json b.json 0 && same_run a.json k1.json 0
    ;;
  resume_other_k)
    # A snapshot saved at K=2 continues at K=3 and K=1.
    train --balance 5,4 --steps 4 --json straight.json >/dev/null 2>&1 || fail "straight run"
    train --balance 5,4 --steps 2 --snapshot-dir ck >/dev/null 2>&1 || fail "first half"
    cp -r ck ck1
    train --balance 3,3,3 --steps 4 --snapshot-dir ck --resume --json k3.json 2>/dev/null || fail "K=3"
    train --partitions 1 --threads-per-device 1 --steps 4 --snapshot-dir ck1 --resume \
      --json k1.json 2>/dev/null || fail "K=1"
    same_run straight.json k3.json 1e-5 && same_run straight.json k1.json 1e-5
    ;;
  crash_during_save)
    train --balance 5,4 --steps 4 --json straight.json >/dev/null 2>&1 || fail "straight run"
    train --balance 5,4 --steps 2 --save-every 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first"
    GPIPE_FAULT_INJECT=crash-during-save train --balance 5,4 --steps 4 --save-every 1 \
      --snapshot-dir ck --resume >/dev/null 2>crash.log
    status=$?
    [[ $status -eq 137 ]] || fail "expected the injected crash (137), got $status"
    [[ "$(cat ck/latest)" == "step-00000002" ]] || fail "latest moved to $(cat ck/latest)"
    ls -a ck | grep -q "step-00000003.tmp" || fail "no half-written snapshot left behind"
    train --balance 5,4 --steps 4 --snapshot-dir ck --resume --json resumed.json 2>/dev/null ||
      fail "resume after the crash"
    [[ ! -e ck/.step-00000003.tmp ]] || fail "the half-written snapshot was not cleaned up"
    same_run straight.json resumed.json 0
    ;;
  kill_during_save)
    # kill -9 at 30 random moments of a run that saves after every step (an MLP of ~50 MB of
    # parameters and RMSprop state, so that most of the time goes to writing snapshots). After
    # every kill `latest` names a snapshot that the next run resumes from (it says so before
    # it saves); the chain of resumed runs ends bit-identical to one straight run.
    mlp=(--model mlp --layers 6 --width 1024 --in-features 1024 --dataset synthetic --batch-size 8
         --chunks 2 --partitions 2 --optimizer rmsprop --lr 0.001 --lr-schedule constant
         --progress off --eval-every -1 --seed 3)
    "$bin/gpipe_train" "${mlp[@]}" --steps 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first"
    RANDOM=13
    mid_save=0
    latest=$(cat ck/latest)
    for trial in $(seq 1 30); do
      # Even trials hold each save open 200 ms after its shards are written (fault slow-save).
      fault=""
      (( trial % 2 == 0 )) && fault=slow-save
      # The last trial's log goes first: the child opens trial.log only once it runs, and a
      # poll that reads the old log's "saved" would kill the new run before it resumes (CI,
      # d56ccaf: trial 15 of 30, under the load of the hostile-inputs test).
      rm -f trial.log
      # Started directly (a function would fork a subshell) so that $! is the trainer itself.
      GPIPE_FAULT_INJECT=$fault "$bin/gpipe_train" "${mlp[@]}" --steps 100000 --save-every 1 \
        --snapshot-dir ck --resume >/dev/null 2>trial.log &
      pid=$!
      # Once it saves (start-up time varies with the build and the load): odd trials pick a
      # random moment of the next second, which holds a few steps and their saves; even trials
      # wait for the next save to begin and pick a random moment of its first 150 ms, which the
      # slow-save pause keeps inside the save, so that kills inside a save do not depend on how
      # compute, writing and this script's own polling share the machine's time (under ASan,
      # beside another test, a save can be over before a 10 ms window opens: 7 of 30 once).
      for _ in $(seq 1 3600); do
        grep -qs "saved" trial.log && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
      done
      if (( trial % 2 == 0 )); then
        for _ in $(seq 1 2000); do
          compgen -G 'ck/.step-*.tmp' >/dev/null && break
          kill -0 "$pid" 2>/dev/null || break
          sleep 0.005
        done
        sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", 0.15 * r / 32767 }')"
      else
        sleep "$(awk -v r=$RANDOM 'BEGIN { printf "%.3f", r / 32767 }')"
      fi
      kill -9 "$pid" 2>/dev/null
      wait "$pid"
      status=$?
      [[ $status -eq 137 ]] || fail "trial $trial: the run ended by itself ($status): $(tail -2 trial.log)"
      grep -qF "resumed from ck/$latest " trial.log ||
        fail "trial $trial did not resume from $latest: $(grep -m3 "resumed\|warn\|error" trial.log || tail -2 trial.log)"
      ls -a ck | grep -q '^\.step-.*\.tmp$' && mid_save=$((mid_save + 1))
      latest=$(cat ck/latest)
    done
    echo "30 kills, $mid_save of them while a snapshot was being written; latest at $latest"
    [[ $mid_save -ge 10 ]] || fail "only $mid_save kills landed while a snapshot was being written"
    final=$(( 10#${latest#step-} + 2 ))
    "$bin/gpipe_train" "${mlp[@]}" --steps "$final" --snapshot-dir ck --resume \
      --json resumed.json 2>resume.log || fail "resuming after the kills: $(tail -2 resume.log)"
    grep -qF "resumed from ck/$latest " resume.log || fail "the last run did not resume from $latest"
    "$bin/gpipe_train" "${mlp[@]}" --steps "$final" --json straight.json >/dev/null 2>&1 ||
      fail "straight run"
    same_run straight.json resumed.json 0
    ;;
  corrupt_fallback)
    # A truncated newest snapshot: --resume warns naming the file and continues from the one
    # before, exactly.
    train --balance 5,4 --steps 4 --json straight.json >/dev/null 2>&1 || fail "straight run"
    train --balance 5,4 --steps 2 --save-every 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first"
    truncate -s 100 ck/step-00000002/stage-1.pt
    train --balance 5,4 --steps 4 --snapshot-dir ck --resume --json resumed.json 2>run.log ||
      fail "resume: $(tail -2 run.log)"
    grep -q "warn.*step-00000002/stage-1.pt" run.log || fail "no warning naming the file: $(cat run.log)"
    grep -q "resumed from .*step-00000001 " run.log || fail "did not fall back: $(grep resumed run.log)"
    same_run straight.json resumed.json 0
    ;;
  disk_full)
    # A snapshot write that fails (a file-size limit stands in for a full disk): exit 1 with the
    # reason, the previous snapshot intact and still `latest`, nothing half-written left.
    mlp=(--model mlp --layers 4 --width 512 --in-features 512 --dataset synthetic --batch-size 8
         --chunks 2 --partitions 2 --optimizer rmsprop --lr 0.001 --progress off --eval-every -1)
    "$bin/gpipe_train" "${mlp[@]}" --steps 3 --json straight.json >/dev/null 2>&1 || fail "straight"
    "$bin/gpipe_train" "${mlp[@]}" --steps 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first"
    (ulimit -f 1024 && exec "$bin/gpipe_train" "${mlp[@]}" --steps 3 --save-every 1 \
      --snapshot-dir ck --resume) >/dev/null 2>run.log
    status=$?
    [[ $status -eq 1 ]] || fail "expected exit 1, got $status: $(tail -2 run.log)"
    grep -q "snapshot of step 2 .*failed.*File too large.*step-00000001 is intact" run.log ||
      fail "the message does not give the reason: $(tail -1 run.log)"
    [[ "$(cat ck/latest)" == "step-00000001" ]] || fail "latest moved to $(cat ck/latest)"
    ls -a ck | grep -q '\.tmp' && fail "a half-written snapshot was left: $(ls -a ck)"
    "$bin/gpipe_train" "${mlp[@]}" --steps 3 --snapshot-dir ck --resume --json resumed.json \
      2>/dev/null || fail "resume from the intact snapshot"
    same_run straight.json resumed.json 0
    ;;
  finetune)
    train --balance 5,4 --steps 2 --snapshot-dir ck >/dev/null 2>&1 || fail "pre-training"
    "$bin/gpipe_train" --model amoebanet-d --layers 3 --filters 16 --image-size 28 --channels 1 \
      --classes 5 --dataset synthetic --batch-size 16 --chunks 2 --balance 5,4 --steps 2 \
      --progress off --finetune-from ck --json ft.json 2>ft.log || fail "fine-tuning: $(tail -3 ft.log)"
    grep -q "fine-tuning from .*new: 8.classifier.weight, 8.classifier.bias" ft.log ||
      fail "the classifier was not replaced: $(grep fine-tuning ft.log)"
    ;;
  nonfinite_loss)
    train --balance 5,4 --steps 6 --save-every 1 --snapshot-dir ck --lr 1e30 --optimizer sgd \
      >/dev/null 2>run.log
    status=$?
    [[ $status -eq 1 ]] || fail "expected exit 1, got $status"
    grep -Eq "the loss of step [0-9]+ is -?(nan|inf)" run.log || fail "no clear message: $(tail -2 run.log)"
    grep -q "last good snapshot is" run.log || fail "the message does not name the snapshot"
    latest=$(cat ck/latest)
    [[ -f "ck/$latest/manifest.json" ]] || fail "the last good snapshot is gone"
    ;;
  other_model)
    train --balance 5,4 --steps 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first run"
    "$bin/gpipe_train" "${base[@]}" --filters 32 --balance 5,4 --steps 2 --snapshot-dir ck \
      --resume >/dev/null 2>run.log
    status=$?
    [[ $status -eq 2 ]] || fail "expected exit 2, got $status"
    grep -qF -- "--filters 32 (the snapshot's: 16)" run.log ||
      fail "the message does not name the mismatch: $(tail -1 run.log)"
    ;;
  corrupt_snapshot)
    train --balance 5,4 --steps 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first run"
    shard=ck/step-00000001/stage-1.pt
    truncate -s 100 "$shard"
    train --balance 5,4 --steps 2 --snapshot-dir ck --resume >/dev/null 2>run.log
    status=$?
    [[ $status -eq 2 ]] || fail "expected exit 2, got $status"
    grep -q "stage-1.pt" run.log || fail "the message does not name the file: $(tail -1 run.log)"
    # One line for the user, no C++ frames.
    ! grep -q "frame #" run.log || fail "LibTorch's backtrace reached the user: $(cat run.log)"
    [[ $(grep -c "\[error\]" run.log) -eq 1 ]] || fail "not one error line: $(cat run.log)"
    ;;
  other_run)
    # A run that does not resume refuses a folder holding another run's snapshots: exit 2, one
    # line naming the folder, the run found there and the choices, the snapshots left intact.
    # --overwrite-snapshots then replaces them, and the new run resumes from its own.
    train --balance 5,4 --steps 3 --save-every 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first run"
    before=$(ls ck | tr '\n' ' ')
    train --balance 5,4 --steps 2 --save-every 1 --snapshot-dir ck --seed 1 >/dev/null 2>run.log
    status=$?
    [[ $status -eq 2 ]] || fail "expected exit 2, got $status"
    [[ $(grep -c "\[error\]" run.log) -eq 1 ]] || fail "not one error line: $(cat run.log)"
    for part in "'ck' holds 2 snapshot(s) of another run" "ck/step-00000003" "model amoebanet-d" \
      "seed 5" "step 3" "--resume" "--overwrite-snapshots"; do
      grep -qF -- "$part" run.log || fail "the message lacks '$part': $(cat run.log)"
    done
    [[ "$(ls ck | tr '\n' ' ')" == "$before" && $(cat ck/latest) == step-00000003 ]] ||
      fail "the refused run changed the folder: $(ls ck), latest $(cat ck/latest)"
    train --balance 5,4 --steps 2 --save-every 1 --snapshot-dir ck --seed 1 \
      --overwrite-snapshots >/dev/null 2>run.log || fail "overwrite: $(tail -2 run.log)"
    [[ "$(ls ck | tr '\n' ' ')" == "latest step-00000001 step-00000002 " &&
      $(cat ck/latest) == step-00000002 ]] || fail "after overwriting: $(ls ck), latest $(cat ck/latest)"
    train --balance 5,4 --steps 3 --snapshot-dir ck --seed 1 --resume >/dev/null 2>run.log ||
      fail "resume the new run: $(tail -2 run.log)"
    grep -q "resumed from ck/step-00000002 " run.log || fail "$(grep resumed run.log)"
    ;;
  prune_own)
    # Pruning removes only this run's snapshots; a manifest with a step below 0 is corrupt, and
    # the resume falls back to the snapshot before it.
    train --balance 5,4 --steps 2 --save-every 1 --snapshot-dir ck >/dev/null 2>&1 || fail "first"
    cp -r ck/step-00000001 ck/step-00000000
    python3 - <<'PY' || exit 1
import json
path = "ck/step-00000000/manifest.json"
m = json.load(open(path))
m["run_id"], m["step"] = "another-run", 0
json.dump(m, open(path, "w"))
PY
    train --balance 5,4 --steps 5 --save-every 1 --snapshot-dir ck --resume >/dev/null 2>run.log ||
      fail "resume: $(tail -2 run.log)"
    [[ "$(ls ck | tr '\n' ' ')" == "latest step-00000000 step-00000004 step-00000005 " ]] ||
      fail "pruning kept the wrong snapshots: $(ls ck)"
    python3 -c 'import json; p = "ck/step-00000005/manifest.json"; m = json.load(open(p)); m["step"] = -7; json.dump(m, open(p, "w"))'
    train --balance 5,4 --steps 6 --snapshot-dir ck --resume >/dev/null 2>run.log ||
      fail "resume past the bad manifest: $(tail -2 run.log)"
    grep -q "its step is -7, below 0" run.log || fail "no warning naming the step: $(cat run.log)"
    grep -q "resumed from ck/step-00000004 " run.log || fail "$(grep resumed run.log)"
    ! ls ck | grep -q -- "step--" || fail "a folder with a negative step appeared: $(ls ck)"
    ;;
  unknown_preset_key)
    printf 'model = "mlp"\nbogus-key = 3\n' > bad.toml
    "$bin/gpipe_train" --config bad.toml >/dev/null 2>run.log
    status=$?
    [[ $status -eq 2 ]] || fail "expected exit 2, got $status"
    grep -q "bogus-key" run.log || fail "the message does not name the key"
    ;;
  bad_toml)
    # What CLI11 would take silently, and a garbage file: exit 2, one printable line naming it.
    printf 'steps = [1, 2]\n' > list.toml
    printf 'steps = 1\nlayers = 2\nsteps = 3\n' > twice.toml
    printf 'model = "mlp"\n\x01\xff\xfe\xc0\x80 = 3\n' > garbage.toml
    for file in list twice garbage; do
      "$bin/gpipe_train" --config $file.toml >/dev/null 2>run.log
      status=$?
      [[ $status -eq 2 ]] || fail "$file.toml: expected exit 2, got $status"
      [[ $(wc -l < run.log) -eq 1 ]] || fail "$file.toml: not one line: $(cat run.log)"
      ! LC_ALL=C grep -q '[^[:print:]]' run.log || fail "$file.toml: raw bytes: $(cat -v run.log)"
    done
    # (Each run's output goes to a file first: grep -q ending a pipe early would fail it.)
    "$bin/gpipe_train" --config list.toml 2>list.log
    grep -q "list.toml:1: 'steps' takes one value" list.log || fail "the list: $(cat list.log)"
    "$bin/gpipe_train" --config twice.toml 2>twice.log
    grep -q "twice.toml:3: 'steps' is given twice" twice.log || fail "twice: $(cat twice.log)"
    "$bin/gpipe_train" --config garbage.toml 2>garbage.log
    grep -qF '\x01\xff\xfe\xc0\x80' garbage.log || fail "not escaped: $(cat -v garbage.log)"
    ;;
  missing_data)
    train --dataset cifar10 --data-dir "$work/nowhere" --steps 1 >/dev/null 2>run.log
    status=$?
    [[ $status -eq 2 ]] || fail "expected exit 2, got $status"
    grep -q "nowhere" run.log || fail "the message does not name the folder"
    ;;
  metrics)
    train --balance 5,4 --steps 3 --eval-every 0 --eval-batch-size 2000 --output-dir out \
      >/dev/null 2>&1 || fail "run"
    python3 - <<'PY' || exit 1
import json
lines = [json.loads(l) for l in open("out/metrics.jsonl")]
steps = [l for l in lines if "loss" in l]
evals = [l for l in lines if "test_top1" in l]
assert [l["step"] for l in steps] == [1, 2, 3], steps
for key in ("epoch", "loss", "lr", "samples_per_s", "peak_bytes_per_device"):
    assert key in steps[0], key
assert len(evals) == 1 and evals[0]["test_examples"] == 10000, evals
s = json.load(open("out/summary.json"))
for key in ("final_test_top1", "final_test_top5", "param_checksum", "losses"):
    assert key in s, key
trace = json.load(open("out/trace.json"))
compute = {e["name"][0] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "compute"}
assert compute == {"F", "B", "R"}, compute  # except_last recomputes micro-batch 0
messages = {e["name"].split("_")[0] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "communication"}
assert messages == {"SEND", "RECV"}, messages
print("metrics, summary and trace ok")
PY
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
echo "ok: $case_name"
