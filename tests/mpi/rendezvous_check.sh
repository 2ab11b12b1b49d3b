#!/usr/bin/env bash
# torchrun-style rendezvous: processes started independently with RANK, WORLD_SIZE, LOCAL_RANK,
# MASTER_ADDR and MASTER_PORT (no mpirun) join one MPI world through ompi-server:
#   1. K = 2 partitions, 2 processes started by hand: bit-identical to 2 threads (stale, gpipe);
#      R = 2 replicas: equal to one process at the whole batch; K = 2 x R = 2 (4 processes started
#      last rank first): bucketed sums bit-identical to one sum (pipeline_mpi_check);
#   2. `echelon launch --rdzv env` (K = 2, stale) and 2 processes by hand (R = 2) write the same
#      checkpoint and losses, bit for bit, as the same runs under `mpirun -np 2`;
#   3. a bad rendezvous (nobody at MASTER_PORT, a missing rank, a RANK given twice, WORLD_SIZE
#      mismatch) fails within the timeout with an error naming what is wrong;
#   4. kill -9 of rank 1 mid-epoch: rank 0 (started by hand) exits non-zero naming rank 1 within
#      30 s, and so does `echelon launch --rdzv env`.
# usage: rendezvous_check.sh ECHELON PIPELINE_MPI_CHECK
set -u
echelon=$1 check=$2
here=$(dirname "$0")
dir=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  rm -rf "$dir"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Loopback only, as the mpirun tests; Open MPI refuses root unless told (containers).
export OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# start RANK WORLD_SIZE PORT LOG CMD...: one process of a rendezvous run, in the background.
start() {
  local rank=$1 world=$2 port=$3 log=$4
  shift 4
  RANK=$rank LOCAL_RANK=$rank WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
    timeout --signal=TERM --kill-after=10 120 "$@" >"$log" 2>&1 &
  pids+=($!)
}
# by_hand NAME WORLD_SIZE CMD...: WORLD_SIZE processes started independently; fails unless all
# exit 0.
by_hand() {
  local name=$1 world=$2 port
  shift 2
  port=$(free_port)
  local mine=()
  local order
  order=$(seq 0 $((world - 1)))
  [ -n "${REVERSE:-}" ] && order=$(seq $((world - 1)) -1 0)
  for rank in $order; do
    start "$rank" "$world" "$port" "$dir/$name.$rank.log" "$@"
    mine+=($!)
  done
  for pid in "${mine[@]}"; do
    wait "$pid" || { cat "$dir/$name".*.log; fail "$name: a rank failed"; }
  done
}
# The losses and accuracies of metrics.jsonl (KEYS: a comma-separated list), record by record.
losses() {
  python3 -c 'import json, sys
keys = sys.argv[2].split(",")
print([[r.get(k) for k in keys] for r in map(json.loads, open(sys.argv[1]))])' "$1" "$2"
}
same_run() {  # same_run DIR_A DIR_B WHAT KEYS
  "$check" --compare "$1/checkpoint.safetensors" "$2/checkpoint.safetensors" || fail "$3: weights differ"
  [ "$(losses "$1/metrics.jsonl" "$4")" = "$(losses "$2/metrics.jsonl" "$4")" ] || fail "$3: losses differ"
  grep -q '"test_loss"' "$1/metrics.jsonl" || fail "$3: metrics.jsonl holds no losses"
}

# 1. the engine's own comparison, processes started by hand
by_hand k2 2 "$check" --partitions 2 --schedules stale,gpipe
cat "$dir"/k2.0.log
by_hand dp 2 "$check" --partitions 1 --data-parallel 2 --schedules sequential --epochs 1 --batches 3
# 4 ranks joining one at a time, started last rank first: K = 2 x R = 2, bit-identical buckets.
REVERSE=1 by_hand k2r2 4 "$check" --partitions 2 --data-parallel 2 --buckets 0.004 --epochs 1 \
  --batches 3 --schedules stale
cat "$dir"/k2r2.0.log
echo "pipeline_mpi_check by rendezvous: ok"

# 2. the CLI: rendezvous runs = mpirun runs, bit for bit
common=(train --model lenet5 --data synthetic --limit-train 256 --limit-test 64 --batch-size 32
        --epochs 2 --lr 0.05 --deterministic --threads 1 --progress none)
"$here/mpirun.sh" 120 2 "$echelon" "${common[@]}" --pipeline 2 --schedule-pipeline stale \
  --out "$dir/mpirun_k2" >"$dir/mpirun_k2.log" 2>&1 || { cat "$dir/mpirun_k2.log"; fail "mpirun K=2"; }
timeout --signal=TERM --kill-after=10 120 "$echelon" launch --rdzv env --master-port "$(free_port)" \
  -- "${common[@]}" --pipeline 2 --schedule-pipeline stale --out "$dir/rdzv_k2" \
  >"$dir/rdzv_k2.log" 2>&1 || { cat "$dir/rdzv_k2.log"; fail "echelon launch --rdzv env, K=2"; }
cat "$dir/rdzv_k2.log"
grep -q "rank 1: host .*, partition 1 of replica 0" "$dir/rdzv_k2.log" || fail "no topology report"
same_run "$dir/rdzv_k2" "$dir/mpirun_k2" "K=2 stale, rendezvous vs mpirun" \
  epoch,loss,train_loss,train_acc,test_loss,test_acc
"$here/mpirun.sh" 120 2 "$echelon" "${common[@]}" --data-parallel 2 --out "$dir/mpirun_dp" \
  >"$dir/mpirun_dp.log" 2>&1 || { cat "$dir/mpirun_dp.log"; fail "mpirun R=2"; }
by_hand cli_dp 2 "$echelon" "${common[@]}" --data-parallel 2 --out "$dir/rdzv_dp"
same_run "$dir/rdzv_dp" "$dir/mpirun_dp" "R=2, rendezvous vs mpirun" \
  epoch,train_loss,train_acc,train_images,test_loss,test_acc
echo "rendezvous runs = mpirun runs: ok"

# 3. bad rendezvous, each bounded by ECHELON_RENDEZVOUS_TIMEOUT=3
export ECHELON_RENDEZVOUS_TIMEOUT=3
expect_error() {  # expect_error LOG TEXT: the process of LOG failed with TEXT in its output
  grep -qF -- "$2" "$1" || { cat "$1"; fail "$1 does not say '$2'"; }
}
bounded_wait() {  # bounded_wait PID WHAT: the process exits non-zero within 20 s
  local start=$SECONDS
  wait "$1" && fail "$2: exited 0"
  [ $((SECONDS - start)) -le 20 ] || fail "$2: took $((SECONDS - start)) s"
}
port=$(free_port)
start 1 2 "$port" "$dir/nobody.log" "$echelon" "${common[@]}" --pipeline 2
bounded_wait $! "nobody at MASTER_PORT"
expect_error "$dir/nobody.log" "RANK=1 could not reach rank 0 at MASTER_ADDR:MASTER_PORT = 127.0.0.1:$port"
port=$(free_port)
start 0 2 "$port" "$dir/alone.log" "$echelon" "${common[@]}" --pipeline 2
bounded_wait $! "a missing rank"
expect_error "$dir/alone.log" "for WORLD_SIZE=2 processes, but RANK 1 never connected"
port=$(free_port)
start 0 3 "$port" "$dir/twice.0.log" "$echelon" "${common[@]}" --pipeline 3
first=$!
start 1 3 "$port" "$dir/twice.1.log" "$echelon" "${common[@]}" --pipeline 3
second=$!
start 1 3 "$port" "$dir/twice.2.log" "$echelon" "${common[@]}" --pipeline 3
third=$!
for pid in $first $second $third; do bounded_wait "$pid" "RANK given twice"; done
for log in "$dir"/twice.*.log; do expect_error "$log" "two processes have RANK=1"; done
port=$(free_port)
start 0 2 "$port" "$dir/sizes.0.log" "$echelon" "${common[@]}" --pipeline 2
first=$!
start 1 3 "$port" "$dir/sizes.1.log" "$echelon" "${common[@]}" --pipeline 2
second=$!
for pid in $first $second; do bounded_wait "$pid" "WORLD_SIZE mismatch"; done
for log in "$dir"/sizes.*.log; do expect_error "$log" "RANK=1 says WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2"; done
unset ECHELON_RENDEZVOUS_TIMEOUT
echo "bad rendezvous: ok"

# 4. kill -9 of rank 1 a moment into a long run
long=(train --model lenet5 --data synthetic --epochs 50 --pipeline 2 --threads 1 --progress none)
port=$(free_port)
start 0 2 "$port" "$dir/kill.0.log" "$echelon" "${long[@]}"
rank0=$!
start 1 2 "$port" "$dir/kill.1.log" "$echelon" "${long[@]}"
rank1=$!
for _ in $(seq 1 150); do grep -q "rank 1: host" "$dir/kill.0.log" && break; sleep 0.2; done
grep -q "rank 1: host" "$dir/kill.0.log" || { cat "$dir"/kill.*.log; fail "the ranks never met"; }
sleep 2
# `timeout` started each rank: the rank is its child.
victim=$(pgrep -P "$rank1")
[ -n "$victim" ] || fail "rank 1's process not found"
start_s=$SECONDS
kill -9 "$victim"
wait "$rank0"
rc=$?
elapsed=$((SECONDS - start_s))
cat "$dir/kill.0.log"
echo "rank 0 after kill -9 of rank 1: exit status $rc after ${elapsed} s"
[ "$rc" -ne 0 ] || fail "rank 0 exited 0"
[ "$rc" -ne 124 ] || fail "rank 0 hung until timeout"
[ "$elapsed" -le 30 ] || fail "took ${elapsed} s (> 30 s)"
expect_error "$dir/kill.0.log" "rank 1's process ended before the run finished"

timeout --signal=TERM --kill-after=10 120 "$echelon" launch --rdzv env --master-port "$(free_port)" \
  -- "${long[@]}" >"$dir/launch_kill.log" 2>&1 &
launcher=$!
pids+=($launcher)
for _ in $(seq 1 150); do grep -qs "rank 1: host" "$dir/launch_kill.log" && break; sleep 0.2; done
sleep 2
victim=""
for pid in $(pgrep -P "$(pgrep -P $launcher | head -1)"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "RANK=1"; then victim=$pid; fi
done
[ -n "$victim" ] || { cat "$dir/launch_kill.log"; fail "rank 1 of echelon launch not found"; }
start_s=$SECONDS
kill -9 "$victim"
wait "$launcher"
rc=$?
elapsed=$((SECONDS - start_s))
cat "$dir/launch_kill.log"
echo "echelon launch after kill -9 of rank 1: exit status $rc after ${elapsed} s"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "echelon launch exited $rc"
[ "$elapsed" -le 30 ] || fail "took ${elapsed} s (> 30 s)"
# The launcher writes this line in one write(2): rank 0's Open MPI messages about the lost peer,
# on the same stderr, cannot split it (they did when it was written piece by piece).
expect_error "$dir/launch_kill.log" "echelon launch: rank 1 (pid $victim) was killed by signal 9"
echo "ok"
