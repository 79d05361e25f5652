#!/usr/bin/env bash
# Starts the local processes of a distributed run, as torchrun does.
#
#   scripts/launch.sh --nproc-per-node P [--nnodes N --node-rank R --master-addr A \
#                     --master-port p --grace S] -- COMMAND [ARGS...]
#
# Each process gets RANK = R*P + LOCAL_RANK, WORLD_SIZE = N*P, LOCAL_RANK, LOCAL_WORLD_SIZE,
# MASTER_ADDR and MASTER_PORT; its output lines are prefixed with "[rank K]". SIGINT and SIGTERM
# are forwarded to every process. When any process fails, the others get S seconds (default 5)
# to notice and report it themselves, then are stopped; the script exits with the first failing
# process's status, and 0 only if every process succeeded.
set -uo pipefail

usage() {
  sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
  exit "${1:-2}"
}

nproc=""
nnodes=1
node_rank=0
master_addr=${MASTER_ADDR:-127.0.0.1}
master_port=${MASTER_PORT:-29500}
grace=5
while [[ $# -gt 0 ]]; do
  case "$1" in
    --nproc-per-node) nproc=$2; shift 2 ;;
    --nnodes) nnodes=$2; shift 2 ;;
    --node-rank) node_rank=$2; shift 2 ;;
    --master-addr) master_addr=$2; shift 2 ;;
    --master-port) master_port=$2; shift 2 ;;
    --grace) grace=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    --) shift; break ;;
    *) echo "launch.sh: unknown option '$1'" >&2; usage ;;
  esac
done
is_count() { [[ "$1" =~ ^[1-9][0-9]*$ ]]; }
is_count "$nproc" || { echo "launch.sh: --nproc-per-node must be a positive integer, got '$nproc'" >&2; exit 2; }
is_count "$nnodes" || { echo "launch.sh: --nnodes must be a positive integer, got '$nnodes'" >&2; exit 2; }
[[ "$node_rank" =~ ^[0-9]+$ && $node_rank -lt $nnodes ]] ||
  { echo "launch.sh: --node-rank must be in 0..$((nnodes - 1)), got '$node_rank'" >&2; exit 2; }
[[ "$master_port" =~ ^[0-9]+$ && $master_port -ge 1 && $master_port -le 65535 ]] ||
  { echo "launch.sh: --master-port must be a TCP port, got '$master_port'" >&2; exit 2; }
[[ "$grace" =~ ^[0-9]+$ ]] || { echo "launch.sh: --grace must be whole seconds, got '$grace'" >&2; exit 2; }
[[ $# -gt 0 ]] || { echo "launch.sh: no command given after --" >&2; usage; }

world=$((nnodes * nproc))
pids=()
for ((local = 0; local < nproc; local++)); do
  rank=$((node_rank * nproc + local))
  RANK=$rank WORLD_SIZE=$world LOCAL_RANK=$local LOCAL_WORLD_SIZE=$nproc \
    MASTER_ADDR=$master_addr MASTER_PORT=$master_port \
    "$@" > >(sed -u "s/^/[rank $rank] /") 2> >(sed -u "s/^/[rank $rank] /" >&2) &
  pids+=($!)
done

stop_all() {
  local signal=$1
  for pid in "${pids[@]}"; do kill "-$signal" "$pid" 2>/dev/null; done
}
trap 'stop_all INT' INT
trap 'stop_all TERM' TERM

status=0
killer=""
remaining=${#pids[@]}
while [[ $remaining -gt 0 ]]; do
  wait -n -p done_pid "${pids[@]}" 2>/dev/null
  code=$?
  [[ -n "${done_pid:-}" ]] || { [[ $code -gt 128 ]] && continue; break; }
  remaining=$((remaining - 1))
  for i in "${!pids[@]}"; do [[ "${pids[$i]}" == "$done_pid" ]] && unset 'pids[i]'; done
  if [[ $code -ne 0 && $status -eq 0 ]]; then
    status=$code
    echo "launch.sh: a process (pid $done_pid) exited with status $code; the others stop in ${grace} s" >&2
    ( sleep "$grace"; stop_all TERM; sleep 10; stop_all KILL ) &
    killer=$!
  fi
  unset done_pid
done
[[ -n "${killer:-}" ]] && kill "$killer" 2>/dev/null
wait 2>/dev/null
exit "$status"
