#!/usr/bin/env bash
# distributed_test.sh CASE BIN_DIR: gpipe_train --distributed over c10d (Gloo, loopback or two
# network namespaces), checked against the in-process pipeline. Exit 0 pass, 1 fail, 77 skip.
set -uo pipefail
case_name=$1
bin=$2
here=$(cd "$(dirname "$0")" && pwd)
launch=$here/../../scripts/launch.sh
work=$(mktemp -d)
pids=()
namespaces=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  for ns in "${namespaces[@]}"; do ip netns del "$ns" 2>/dev/null; done
  rm -rf "$work"
}
trap cleanup EXIT
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

mlp=(--model mlp --layers 5 --width 64 --in-features 16 --classes 8 --batch-size 32 --chunks 4
     --steps 5 --seed 3 --dropout 0.1 --optimizer sgd --lr 0.05 --progress off)
same_run() {  # A.json B.json TOLERANCE
  python3 - "$@" <<'PY' || exit 1
import json, sys
a, b, tol = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
worst = max(abs(x - y) for x, y in zip(a["losses"], b["losses"]))
assert len(a["losses"]) == len(b["losses"]) and worst <= tol, f"losses {a['losses']} vs {b['losses']}"
ca, cb = a["param_checksum"], b["param_checksum"]
assert abs(ca - cb) <= tol * max(1.0, abs(ca)), f"checksum {ca} vs {cb}"
print(f"same losses (max diff {worst:.1e}) and checksum {ca:.9f}")
PY
}

# launch_ranks WORLD TIMEOUT TRAIN_ARGS...: starts WORLD ranks of gpipe_train --distributed in
# the background (pids in $pids, output in rankK.log).
launch_ranks() {
  local world=$1 timeout=$2 port rank
  shift 2
  port=$(free_port)
  for ((rank = 0; rank < world; ++rank)); do
    RANK=$rank WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$bin/gpipe_train" --distributed "$@" --comm-timeout "$timeout" --progress off \
      >"rank$rank.log" 2>&1 &
    pids+=($!)
  done
}

# wait_for_log FILE PATTERN: waits up to 120 s (start-up is slow under sanitizers) for PATTERN.
wait_for_log() {
  for _ in $(seq 1 1200); do
    grep -q "$2" "$1" && return 0
    sleep 0.1
  done
  return 1
}

# start_ranks WORLD TIMEOUT TRAIN_ARGS...: a long run, returning once the steps are under way:
# every rank has joined once rank 0 reports the data, then 2 s of steps.
start_ranks() {
  local world=$1 timeout=$2
  shift 2
  launch_ranks "$world" "$timeout" "$@" --steps 100000
  wait_for_log rank0.log "data:"
  sleep 2
}

# kill_one WORLD VICTIM NAME TRAIN_ARGS...: WORLD ranks train; once they are under way every
# rank outlives a SIGPIPE, then VICTIM is killed; every other rank must exit non-zero within the
# 30 s timeout, naming NAME.
kill_one() {
  local world=$1 victim=$2 name=$3
  shift 3
  local rank killed elapsed status
  start_ranks "$world" 30 "$@"
  # A write toward a dead peer raises SIGPIPE (Gloo writes with writev): no rank may die of it.
  for ((rank = 0; rank < world; ++rank)); do kill -PIPE "${pids[$rank]}"; done
  sleep 0.5
  for ((rank = 0; rank < world; ++rank)); do
    kill -0 "${pids[$rank]}" 2>/dev/null || fail "rank $rank died of SIGPIPE: $(tail -2 rank$rank.log)"
  done
  kill -9 "${pids[$victim]}"
  killed=$(date +%s)
  for ((rank = 0; rank < world; ++rank)); do
    [[ $rank -ne $victim ]] || continue
    wait "${pids[$rank]}"
    status=$?
    [[ $status -ne 0 ]] || fail "rank $rank exited 0"
    grep -q "$name was lost" "rank$rank.log" ||
      fail "rank $rank does not name $name: $(tail -2 rank$rank.log)
every rank's last line: $(tail -n1 rank*.log)"
  done
  elapsed=$(( $(date +%s) - killed ))
  pids=()
  [[ $elapsed -lt 30 ]] || fail "the survivors took $elapsed s (timeout 30 s)"
  echo "survivors exited non-zero ${elapsed} s after the kill, naming $name"
}

case "$case_name" in
  two_processes)
    "$bin/gpipe_train" "${mlp[@]}" --balance 3,3 --json local.json 2>/dev/null || fail "in-process"
    "$launch" --nproc-per-node 2 --master-port "$(free_port)" -- \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 --json dist.json >run.log 2>&1 ||
      fail "distributed: $(tail -5 run.log)"
    same_run local.json dist.json 1e-6
    # Every schedule runs over c10d.
    "$launch" --nproc-per-node 2 --master-port "$(free_port)" -- \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 --schedule 1f1b \
      --json dist_1f1b.json >run.log 2>&1 || fail "1f1b: $(tail -5 run.log)"
    same_run local.json dist_1f1b.json 1e-6
    ;;
  schedules)
    # Every schedule and K=1 train to the same parameters in one process; four processes over
    # c10d train to the in-process parameters under every schedule.
    eight=(--model mlp --layers 8 --width 32 --in-features 16 --classes 8 --batch-size 32
           --chunks 8 --steps 4 --seed 3 --dropout 0.1 --optimizer sgd --lr 0.05 --progress off)
    "$bin/gpipe_train" "${eight[@]}" --partitions 1 --json k1.json 2>/dev/null || fail "K=1"
    # A schedule file too: dualpipev written out and read back as a custom schedule.
    "$bin/gpipe_sim" -K 4 -M 8 --schedule dualpipev --write-schedule "$PWD/custom.txt" \
      >/dev/null || fail "--write-schedule"
    for name in gpipe 1f1b interleaved-1f1b zb-h1 zb-h2 zbv looped-bfs dualpipev v-half custom; do
      s=$name
      [[ $name == custom ]] && s=file:$PWD/custom.txt
      "$bin/gpipe_train" "${eight[@]}" --partitions 4 --schedule "$s" --json "local_$name.json" \
        2>"local_$name.log" || fail "$name in process: $(tail -3 "local_$name.log")"
      same_run k1.json "local_$name.json" 1e-6
      "$launch" --nproc-per-node 4 --master-port "$(free_port)" -- \
        "$bin/gpipe_train" --distributed "${eight[@]}" --partitions 4 --schedule "$s" \
        --json "dist_$name.json" >run.log 2>&1 || fail "$name distributed: $(tail -5 run.log)"
      same_run "local_$name.json" "dist_$name.json" 1e-6
    done
    ;;
  grad_clip)
    # Clipping by the norm over every stage of every process: 2 stages, and 2 stages x 2
    # replicas, clip exactly as the in-process pipeline does.
    clip=(--model mlp --layers 4 --width 64 --in-features 16 --classes 8 --batch-size 32
          --chunks 4 --steps 5 --seed 3 --optimizer sgd --lr 0.05 --progress off --balance 3,2
          --grad-clip 0.05)
    "$bin/gpipe_train" "${clip[@]}" --json local.json 2>/dev/null || fail "in-process"
    for n in 2 4; do
      "$launch" --nproc-per-node $n --master-port "$(free_port)" -- \
        "$bin/gpipe_train" --distributed "${clip[@]}" --json "dist_$n.json" >run.log 2>&1 ||
        fail "$n processes: $(tail -5 run.log)"
      same_run local.json "dist_$n.json" 1e-5
    done
    ;;
  data_parallel)
    # K=2 x R=2: each replica half of each micro-batch, the same losses as one K=2 pipeline;
    # with BatchNorm after each hidden layer, synchronised over the replicas.
    "$bin/gpipe_train" "${mlp[@]}" --dropout 0 --batch-norm --balance 3,3 --json local.json \
      2>/dev/null || fail "in-process"
    "$launch" --nproc-per-node 4 --master-port "$(free_port)" -- \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --dropout 0 --batch-norm --sync-batchnorm \
      --balance 3,3 --json dist.json >run.log 2>&1 || fail "distributed: $(tail -5 run.log)"
    same_run local.json dist.json 1e-5
    python3 - <<'PY' || exit 1
import json
s = json.load(open("dist.json"))
assert len(s["grad_reduce_ms"]) == 5 and min(s["grad_reduce_ms"]) > 0, s["grad_reduce_ms"]
assert all(0 <= e for e in s["grad_reduce_exposed_ms"]), s["grad_reduce_exposed_ms"]
PY
    ;;
  sync_batchnorm)
    # K=2 x R=2 AmoebaNet-D on Fashion-MNIST (BatchNorm; no dropout or drop-path, whose masks
    # follow the micro-batch's shape): with --sync-batchnorm the single-process run's losses and
    # checksum; without, BatchNorm normalises each replica's half alone and the run differs.
    # Two steps: this tiny net turns float noise into 1e-2 by step 3 (in-process runs that
    # differ only in --threads-per-device do too).
    amoeba=(--model amoebanet-d --layers 3 --filters 16 --image-size 28 --dataset fashion-mnist
            --batch-size 32 --chunks 2 --workers 1 --dropout 0 --drop-path 0 --eval-every -1
            --progress off --optimizer sgd --lr 0.01 --seed 5 --steps 2 --balance 5,4)
    "$bin/gpipe_train" "${amoeba[@]}" --json local.json 2>/dev/null || fail "in-process"
    for sync in on off; do
      flag=(); [[ $sync == on ]] && flag=(--sync-batchnorm)
      "$launch" --nproc-per-node 4 --master-port "$(free_port)" -- \
        "$bin/gpipe_train" --distributed "${amoeba[@]}" "${flag[@]}" --json "sync-$sync.json" \
        >run.log 2>&1 || fail "distributed, sync $sync: $(tail -5 run.log)"
    done
    same_run local.json sync-on.json 1e-4
    if (same_run local.json sync-off.json 1e-4) >/dev/null 2>&1; then
      fail "without --sync-batchnorm the replicas should differ from the single process"
    fi
    ;;
  sharded_loading)
    # K=2 x R=2 on Fashion-MNIST: each rank's loader decodes only its 16 of the 32 examples.
    "$launch" --nproc-per-node 4 --master-port "$(free_port)" -- \
      "$bin/gpipe_train" --distributed --model amoebanet-d --layers 3 --filters 16 \
      --image-size 28 --dataset fashion-mnist --batch-size 32 --chunks 2 --workers 1 \
      --eval-every -1 --progress off --steps 2 --balance 5,4 --json dist.json \
      >run.log 2>&1 || fail "distributed: $(tail -5 run.log)"
    python3 - <<'PY' || exit 1
import json
s = json.load(open("dist.json"))
assert s["examples_loaded_per_rank"] == [16, 16], s["examples_loaded_per_rank"]
assert len(s["grad_reduce_ms"]) == 2, s
print("each rank loaded", s["examples_loaded_per_rank"])
PY
    ;;
  plan_replicas)
    # gpipe_plan measures plans with replicas as K x R gpipe_train processes: 1 x 2 and 2 x 2.
    "$bin/gpipe_plan" --model mlp --layers 4 --width 32 --batch-size 8 --max-chunks 2 \
      --devices 4 --grid "K=1,R=2,M=2;K=2,R=2,M=2" --json plan.json >plan.log 2>&1 ||
      fail "gpipe_plan: $(tail -5 plan.log)"
    python3 - <<'PY' || exit 1
import json
grid = json.load(open("plan.json"))["grid"]
for plan, K in zip(grid, (1, 2)):
    assert plan["R"] == 2 and plan["K"] == K, plan
    assert plan["measured_step_ms"] > 0, plan
    peaks = plan["measured_peak_bytes_per_device"]
    assert len(peaks) == K and min(peaks) > 0, peaks
    assert plan["command"].startswith("scripts/launch.sh --nproc-per-node %d" % (2 * K)), plan
print("measured", [(p["K"], p["R"], round(p["measured_step_ms"], 1)) for p in grid])
PY
    ;;
  two_hosts)
    # Two network namespaces joined by a veth pair stand in for two hosts.
    id=$$
    a=gpipe-a-$id
    b=gpipe-b-$id
    if ! ip netns add "$a" 2>/dev/null; then
      echo "SKIP: cannot create network namespaces here (needs CAP_NET_ADMIN)"
      exit 77
    fi
    namespaces+=("$a")
    skip() { echo "SKIP: cannot set up the two namespaces here ($1)"; exit 77; }
    ip netns add "$b" || skip "second namespace"
    namespaces+=("$b")
    octet=$(( (id % 250) + 1 ))
    ip link add "ga$id" type veth peer name "gb$id" || skip "veth pair"
    { ip link set "ga$id" netns "$a" && ip link set "gb$id" netns "$b"; } || skip "moving the veth ends"
    { ip -n "$a" addr add "10.231.$octet.1/30" dev "ga$id" &&
      ip -n "$b" addr add "10.231.$octet.2/30" dev "gb$id"; } || skip "addresses"
    for ns in "$a" "$b"; do ip -n "$ns" link set lo up || skip "loopback"; done
    { ip -n "$a" link set "ga$id" up && ip -n "$b" link set "gb$id" up; } || skip "links up"
    "$bin/gpipe_train" "${mlp[@]}" --balance 3,3 --json local.json 2>/dev/null || fail "in-process"
    master=10.231.$octet.1
    port=29400
    ip netns exec "$a" env OMP_WAIT_POLICY=PASSIVE "$launch" --nproc-per-node 1 --nnodes 2 --node-rank 0 \
      --master-addr "$master" --master-port $port -- \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 --json dist.json >host0.log 2>&1 &
    pids+=($!)
    ip netns exec "$b" env OMP_WAIT_POLICY=PASSIVE "$launch" --nproc-per-node 1 --nnodes 2 --node-rank 1 \
      --master-addr "$master" --master-port $port -- \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 >host1.log 2>&1 || fail "host 1: $(tail -5 host1.log)"
    wait "${pids[0]}" || fail "host 0: $(tail -5 host0.log)"
    pids=()
    same_run local.json dist.json 1e-6
    ;;
  kill_rank)
    # Three stages as three processes; kill the middle one mid-step: the others must exit
    # non-zero well within the timeout, naming rank 1.
    kill_one 3 1 "rank 1 (device 1, replica 0)" --model sleep --layers 3 --layer-ms 20 \
      --balance 1,1,1 --chunks 4 --batch-size 8
    ;;
  kill_replica)
    # K=2 x R=2 with 8 MiB of gradients summed over the replicas on the communication thread;
    # kill rank 3 (replica 1's last stage) mid-step: the others exit naming it.
    kill_one 4 3 "rank 3 (device 1, replica 1)" --model mlp --layers 4 --width 640 \
      --in-features 64 --classes 8 --balance 3,2 --chunks 4 --batch-size 32 --bucket-mb 1
    ;;
  evaluation)
    # K=2 x R=2 (BatchNorm synchronised, so the weights are the in-process run's) evaluate the
    # test split as the in-process run does: each replica its share of every batch through its
    # pipeline, the counts summed over the world.
    amoeba=(--model amoebanet-d --layers 3 --filters 16 --image-size 28 --dataset fashion-mnist
            --batch-size 32 --chunks 2 --workers 1 --steps 1 --eval-batch-size 500
            --eval-batches 4 --balance 5,4 --progress off)
    "$bin/gpipe_train" "${amoeba[@]}" --json local.json 2>/dev/null || fail "in-process"
    "$launch" --nproc-per-node 4 --master-port "$(free_port)" -- \
      "$bin/gpipe_train" --distributed "${amoeba[@]}" --sync-batchnorm --json dist.json >run.log 2>&1 ||
      fail "distributed: $(tail -5 run.log)"
    python3 - <<'PY' || exit 1
import json
a, b = json.load(open("local.json")), json.load(open("dist.json"))
for key in ("final_test_top1", "final_test_top5"):
    assert a[key] is not None and abs(a[key] - b[key]) <= 2e-4, (key, a[key], b[key])
assert b["evaluations"][-1]["examples"] == 2000, b["evaluations"]
print("top-1", b["final_test_top1"], "on 2000 examples, as in-process")
PY
    ;;
  kill_during_eval)
    # Two stages on Fashion-MNIST; rank 1 is killed while the final evaluation runs (1000
    # batches of 10): rank 0 must exit non-zero naming it, as in training.
    launch_ranks 2 30 --model amoebanet-d --layers 3 --filters 16 --image-size 28 \
      --dataset fashion-mnist --batch-size 32 --chunks 2 --workers 1 --steps 1 \
      --eval-batch-size 10 --balance 5,4
    wait_for_log rank0.log "evaluating"
    kill -9 "${pids[1]}"
    wait "${pids[0]}"
    status=$?
    pids=()
    [[ $status -ne 0 ]] || fail "rank 0 exited 0: $(tail -2 rank0.log)"
    grep -q "rank 1 (device 1, replica 0) was lost" rank0.log ||
      fail "rank 0 does not name rank 1: $(tail -2 rank0.log)"
    echo "rank 0 exited $status during the evaluation, naming rank 1"
    ;;
  bad_peer)
    # Rank 1 sends what a peer with a defect would: a header no receiver can parse, then
    # (another run) gradients of the wrong shape. Rank 0 must end the step naming rank 1, and
    # both must exit non-zero well within the timeout.
    for fault in bad-header wrong-shape; do
      port=$(free_port)
      for rank in 0 1; do
        GPIPE_FAULT_INJECT="$fault@1" RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
          MASTER_PORT=$port "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 \
          --comm-timeout 30 >"$fault$rank.log" 2>&1 &
        pids+=($!)
      done
      start=$(date +%s)
      for rank in 0 1; do
        wait "${pids[$rank]}"
        [[ $? -ne 0 ]] || fail "$fault: rank $rank exited 0"
      done
      pids=()
      elapsed=$(( $(date +%s) - start ))
      [[ $elapsed -lt 30 ]] || fail "$fault: the ranks took $elapsed s (timeout 30 s)"
      case $fault in
        bad-header) expected="corrupt message header from rank 1 (device 1, replica 0)" ;;
        wrong-shape) expected="rank 1 (device 1, replica 0) sent stage 0 a gradient of shape \[9, 64\]" ;;
      esac
      grep -q "$expected" "${fault}0.log" || fail "$fault: rank 0 says: $(grep -m2 error "${fault}0.log")"
      echo "$fault: both ranks exited in ${elapsed} s; rank 0: $(grep -m1 -o "$expected[^;]*" "${fault}0.log")"
    done
    ;;
  stalled_rank)
    # A rank that stops answering (SIGSTOP: alive, silent): the others give up after the
    # timeout, naming it, instead of waiting forever.
    start_ranks 2 10 --model sleep --layers 2 --layer-ms 20 --balance 1,1 --chunks 4 \
      --batch-size 8
    kill -STOP "${pids[1]}"
    stopped=$(date +%s)
    wait "${pids[0]}"
    status=$?
    elapsed=$(( $(date +%s) - stopped ))
    [[ $status -ne 0 ]] || fail "rank 0 exited 0"
    grep -q "rank 1 (device 1, replica 0) was lost" rank0.log || fail "rank 0: $(tail -2 rank0.log)"
    [[ $elapsed -lt 30 ]] || fail "rank 0 took $elapsed s with a 10 s timeout"
    echo "rank 0 gave up ${elapsed} s after rank 1 went silent, naming it"
    ;;
  restart)
    # Kill a rank after some snapshots; a relaunch with --resume finishes the run exactly.
    "$bin/gpipe_train" "${mlp[@]}" --steps 30 --balance 3,3 --json local.json 2>/dev/null || fail "in-process"
    port=$(free_port)
    "$launch" --nproc-per-node 2 --master-port "$port" --grace 1 -- "$bin/gpipe_train" --distributed \
      "${mlp[@]}" --steps 30 --balance 3,3 --save-every 1 --snapshot-dir ck --comm-timeout 10 \
      >first.log 2>&1 &
    launcher=$!
    for _ in $(seq 100); do [[ -f ck/latest ]] && break; sleep 0.1; done
    sleep 0.5
    # Rank 1 of this test only (its working directory is ours): tests run in parallel.
    victim=$(pgrep -f "gpipe_train --distributed" | while read -r p; do
      [[ /proc/$p/cwd -ef $work ]] || continue
      tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx RANK=1 && echo "$p"; done | head -1)
    [[ -n "$victim" ]] && kill -9 "$victim"
    wait $launcher
    [[ -f ck/latest ]] || fail "no snapshot was written before the kill"
    echo "killed at $(cat ck/latest)"
    "$launch" --nproc-per-node 2 --master-port "$(free_port)" -- "$bin/gpipe_train" --distributed \
      "${mlp[@]}" --steps 30 --balance 3,3 --save-every 1 --snapshot-dir ck --resume \
      --json dist.json >second.log 2>&1 || fail "resume: $(tail -5 second.log)"
    grep -q "resumed from" second.log || fail "did not resume"
    same_run local.json dist.json 1e-6
    ;;
  world_not_multiple)
    RANK=0 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 >run.log 2>&1
    [[ $? -eq 2 ]] || fail "expected exit 2: $(tail -2 run.log)"
    grep -q "WORLD_SIZE=3 is not a multiple of K=2" run.log || fail "$(tail -1 run.log)"
    ;;
  missing_master)
    env -u MASTER_ADDR RANK=0 WORLD_SIZE=2 MASTER_PORT=29999 \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 >run.log 2>&1
    [[ $? -eq 2 ]] || fail "expected exit 2: $(tail -2 run.log)"
    grep -q "MASTER_ADDR is not set" run.log || fail "$(tail -1 run.log)"
    ;;
  unreachable_master)
    start=$(date +%s)
    RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$(free_port) \
      "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 --comm-timeout 3 >run.log 2>&1
    status=$?
    [[ $status -ne 0 ]] || fail "exit 0 without a master"
    grep -q "cannot reach the master at 127.0.0.1" run.log || fail "$(tail -1 run.log)"
    (( $(date +%s) - start < 30 )) || fail "took too long"
    ;;
  duplicate_rank)
    port=$(free_port)
    for rank in 0 1 1; do
      RANK=$rank WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
        "$bin/gpipe_train" --distributed "${mlp[@]}" --balance 3,3 --comm-timeout 10 \
        --steps 200 >"run${#pids[@]}.log" 2>&1 &
      pids+=($!)
    done
    failures=0
    for i in 0 1 2; do wait "${pids[$i]}" || failures=$((failures + 1)); done
    pids=()
    # Every process stops: the duplicate at once, the others through the store's abort key.
    [[ $failures -eq 3 ]] || fail "only $failures of 3 processes stopped: $(tail -n1 run*.log)"
    for i in 0 1 2; do
      grep -q "RANK=1 is claimed by" "run$i.log" || fail "run$i: $(tail -1 run$i.log)"
    done
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
echo "ok: $case_name"
