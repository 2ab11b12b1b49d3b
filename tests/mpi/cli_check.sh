#!/usr/bin/env bash
# `echelon train` under mpirun, one process per partition:
#   1. bit-identical checkpoint to the threaded --pipeline 2 run (stale, deterministic), and
#      --trace gives one timeline of both ranks (trace_check.py);
#   2. `echelon eval` loads the gathered checkpoint in one process;
#   3. a run stopped after epoch 1 and resumed with the same K ends bit-identical too;
#   4. the same for 2 partitions x 2 data-parallel replicas (4 processes);
#   5. `echelon launch` (mpirun started by echelon) gives the same checkpoint as 1.;
#   6. killing rank 1 mid-epoch ends the run non-zero within 30 s, naming rank 1;
#   7. data parallel (R = 2): every epoch counts all its training images, and the training
#      metrics are the same from run to run (replica 1's last shares arrived at the flush, after
#      replica 0's, and the trainer dropped them: 224 of 256 images in about half the epochs);
#   8. ranks confined to one CPU (taskset, as mpirun's default binding to a core does) with
#      --threads 2: the topology report lists their CPU and warns, naming --bind-to none.
# usage: cli_check.sh ECHELON PIPELINE_MPI_CHECK
set -u
echelon=$1 check=$2
here=$(dirname "$0")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
common=(train --model lenet5 --data synthetic --limit-train 512 --limit-test 128 --batch-size 32
        --epochs 2 --lr 0.05 --pipeline 2 --schedule-pipeline stale --deterministic --threads 1
        --progress none)

"$echelon" "${common[@]}" --out "$dir/threads" >"$dir/threads.log" 2>&1 \
  || { cat "$dir/threads.log"; fail "threaded run"; }
"$here/mpirun.sh" 120 2 "$echelon" "${common[@]}" --out "$dir/procs" --trace "$dir/trace.json" \
  >"$dir/procs.log" 2>&1 || { cat "$dir/procs.log"; fail "2-process run"; }
python3 "$here/trace_check.py" "$dir/trace.json" || fail "the merged trace of 2 processes"
grep -q "rank 1: host .*, device cpu, partition 1 of replica 0, cpus [0-9]" "$dir/procs.log" ||
  fail "the topology report does not name rank 1's device and CPUs"
[ -f "$dir/trace.json.rank1" ] || fail "rank 1 kept no trace of its own"
cat "$dir/procs.log"
"$check" --compare "$dir/procs/checkpoint.safetensors" "$dir/threads/checkpoint.safetensors" \
  || fail "2 processes and 2 threads differ"
[ -f "$dir/procs/summary.json" ] && [ -f "$dir/procs/report.html" ] || fail "rank 0 wrote no summary"

"$echelon" eval --checkpoint "$dir/procs/checkpoint.safetensors" --limit-test 128 \
  >"$dir/eval.log" 2>&1 || { cat "$dir/eval.log"; fail "eval of the gathered checkpoint"; }
"$echelon" eval --checkpoint "$dir/threads/checkpoint.safetensors" --limit-test 128 \
  >"$dir/eval_threads.log" 2>&1 || fail "eval of the threaded checkpoint"
cmp -s "$dir/eval.log" "$dir/eval_threads.log" || fail "eval outputs differ"

"$here/mpirun.sh" 120 2 "$echelon" "${common[@]}" --stop-after-epoch 1 --out "$dir/resumed" \
  >"$dir/stop.log" 2>&1 || { cat "$dir/stop.log"; fail "2-process run stopped after epoch 1"; }
"$here/mpirun.sh" 120 2 "$echelon" train --resume "$dir/resumed" \
  --progress none >"$dir/resume.log" 2>&1 \
  || { cat "$dir/resume.log"; fail "2-process resume"; }
"$check" --compare "$dir/resumed/checkpoint.safetensors" "$dir/procs/checkpoint.safetensors" \
  || fail "the resumed run differs from the uninterrupted one"

# `echelon launch` works out -np 2 from --pipeline 2 and starts mpirun itself (loopback only here).
OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo \
  timeout --signal=TERM --kill-after=10 120 "$echelon" launch -- "${common[@]}" \
  --out "$dir/launched" >"$dir/launch.log" 2>&1 || { cat "$dir/launch.log"; fail "echelon launch"; }
grep -q "mpirun .* -np 2 " "$dir/launch.log" || fail "launch did not print its mpirun command"
"$check" --compare "$dir/launched/checkpoint.safetensors" "$dir/threads/checkpoint.safetensors" \
  || fail "echelon launch and 2 threads differ"

# K = 2 x R = 2 (4 processes): stopped after epoch 1 and resumed (its flags from config.json)
# ends bit-identical to the uninterrupted run.
"$here/mpirun.sh" 120 4 "$echelon" "${common[@]}" --data-parallel 2 --out "$dir/dp" \
  >"$dir/dp.log" 2>&1 || { cat "$dir/dp.log"; fail "2 x 2 run"; }
# summary.json: every rank's partition statistics, gathered by rank 0.
python3 - "$dir/dp/summary.json" "$dir/dp/config.json" <<'PY' || fail "per-rank statistics of the 2 x 2 run"
import json, sys
processes = json.load(open(sys.argv[1]))["pipeline"]["processes"]
ranks = processes["ranks"]
assert [r["rank"] for r in ranks] == [0, 1, 2, 3], ranks
assert sorted((r["replica"], r["partition"]) for r in ranks) == [(0, 0), (0, 1), (1, 0), (1, 1)]
for r in ranks:
    assert r["partition"] == r["rank"] % 2 and r["replica"] == r["rank"] // 2, r
    assert r["host"] and r["device"] == "cpu", r
    assert r["batches"] > 0 and r["busy_s"] > 0, r
    assert r["forward_s"] > 0 and r["backward_s"] > 0 and r["update_s"] > 0, r
    assert r["bytes_sent"] > 0 and r["bytes_received"] > 0, r  # each has a neighbour
    # Taking the bodies in is part of the receives' time; every rank received some.
    assert 0 < r["body_receive_s"] <= r["wait_s"], r
    assert r["send_s"] >= 0, r
    assert r["all_reduce_buckets"] > 0 and r["all_reduce_bytes"] > 0, r
    assert r["all_reduce_buckets_overlapped"] > 0 and r["all_reduce_wait_s"] >= 0, r
# what each replica's partition 0 sent (activations, labels), its partition 1 received, and back
for replica in (0, 1):
    first, last = ranks[2 * replica], ranks[2 * replica + 1]
    assert first["bytes_sent"] == last["bytes_received"], (first, last)
    assert last["bytes_sent"] == first["bytes_received"], (first, last)
assert processes["bucket_mb"] == 1, processes
assert json.load(open(sys.argv[2]))["engine"]["bucket-mb"] == 1, "config.json lacks bucket-mb"
print("per-rank statistics ok:", [(r["rank"], r["batches"], r["bytes_sent"]) for r in ranks])
PY
"$here/mpirun.sh" 120 4 "$echelon" "${common[@]}" --data-parallel 2 --stop-after-epoch 1 \
  --out "$dir/dp_resumed" >"$dir/dp_stop.log" 2>&1 || { cat "$dir/dp_stop.log"; fail "2 x 2 stop"; }
"$here/mpirun.sh" 120 4 "$echelon" train --resume "$dir/dp_resumed" --progress none \
  >"$dir/dp_resume.log" 2>&1 || { cat "$dir/dp_resume.log"; fail "2 x 2 resume"; }
"$check" --compare "$dir/dp_resumed/checkpoint.safetensors" "$dir/dp/checkpoint.safetensors" \
  || fail "the resumed 2 x 2 run differs from the uninterrupted one"

# Kill rank 1 (found by its Open MPI environment) a moment into a long run.
"$here/mpirun.sh" 120 2 "$echelon" train --model lenet5 --data synthetic --epochs 50 \
  --pipeline 2 --progress none >"$dir/kill.log" 2>&1 &
launcher=$!
victim=""
for _ in $(seq 1 100); do
  for pid in $(pgrep -P "$(pgrep -P $launcher | head -1)" 2>/dev/null) $(pgrep -P $launcher); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then
      victim=$pid
    fi
  done
  [ -n "$victim" ] && break
  sleep 0.2
done
[ -n "$victim" ] || { kill "$launcher"; fail "rank 1 never started"; }
sleep 3
start=$(date +%s)
kill -9 "$victim"
wait "$launcher"
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$dir/kill.log"
echo "after kill -9 of rank 1: exit status $rc after ${elapsed} s"
[ "$rc" -ne 0 ] || fail "the run exited 0"
# 137: mpirun passes on the signal that ended rank 1; 124 would be the timeout.
[ "$rc" -ne 124 ] || fail "the run hung until timeout"
[ "$elapsed" -le 30 ] || fail "took ${elapsed} s (> 30 s)"
grep -q "rank 1" "$dir/kill.log" || fail "the output does not name rank 1"

dp=(train --model lenet5 --data synthetic --limit-train 256 --limit-test 64 --batch-size 32
    --epochs 2 --lr 0.05 --deterministic --threads 1 --progress none --data-parallel 2)
for run in 1 2 3; do
  "$here/mpirun.sh" 120 2 "$echelon" "${dp[@]}" --out "$dir/dp_metrics$run" \
    >"$dir/dp_metrics$run.log" 2>&1 || { cat "$dir/dp_metrics$run.log"; fail "R=2 run $run"; }
  images=$(grep -o '"train_images":[0-9]*' "$dir/dp_metrics$run/metrics.jsonl" | tr '\n' ' ')
  [ "$images" = '"train_images":256 "train_images":256 ' ] ||
    fail "R=2 run $run: training images per epoch: $images (expected 256 in both epochs)"
  grep -o '"train_loss":[^,]*,"train_acc":[^,]*' "$dir/dp_metrics$run/metrics.jsonl" \
    >"$dir/dp_metrics$run.train"
  [ -s "$dir/dp_metrics$run.train" ] || fail "R=2 run $run: no training metrics in metrics.jsonl"
  cmp -s "$dir/dp_metrics1.train" "$dir/dp_metrics$run.train" ||
    fail "R=2: training metrics of run $run differ from run 1"
done
taskset -c 0 "$here/mpirun.sh" 120 2 "$echelon" train --model lenet5 --data synthetic \
  --limit-train 64 --limit-test 32 --batch-size 32 --epochs 1 --threads 2 --progress none \
  --pipeline 2 --out "$dir/bound" >"$dir/bound.log" 2>&1 || { cat "$dir/bound.log"; fail "bound run"; }
grep -q "rank 1: host .*, partition 1 of replica 0, cpus 0$" "$dir/bound.log" ||
  { cat "$dir/bound.log"; fail "the topology report does not list rank 1's one CPU"; }
grep -q "warning: rank 1 may run on 1 CPU (0) but has --threads 2.*--bind-to none" \
  "$dir/bound.log" || { cat "$dir/bound.log"; fail "no warning for --threads 2 on one CPU"; }
echo "ok"
