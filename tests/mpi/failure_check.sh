#!/usr/bin/env bash
# A process of a multi-process run fails; every process must end, non-zero, within 30 s, and the
# output must name the failing rank.
#   failure_check.sh error PIPELINE_MPI_CHECK   rank 1 throws after two steps
#   failure_check.sh empty-balance PIPELINE_MPI_CHECK   --balance auto, and the first epoch has
#       no mini-batch to profile: rank 0 fails saying so, while rank 1 waits in follow_epoch
set -u
here=$(dirname "$0")
check=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
if [ "$1" = error ]; then
  failing=1 expected="rank 1"
  "$here/mpirun.sh" 60 2 "$check" --partitions 2 --fail-rank 1 --schedules stale >"$log" 2>&1
else  # empty-balance
  failing=0 expected="--balance auto profiles the first mini-batch, but epoch 1 had none"
  "$here/mpirun.sh" 60 2 "$check" --partitions 2 --follow 1 --empty-epoch 0 --balance-auto 1 \
    --schedules stale >"$log" 2>&1
fi
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
echo "exit status $rc after ${elapsed} s"
[ "$rc" -ne 0 ] || { echo "FAIL: the run exited 0"; exit 1; }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || { echo "FAIL: the run hung until timeout"; exit 1; }
[ "$elapsed" -le 30 ] || { echo "FAIL: took ${elapsed} s (> 30 s)"; exit 1; }
grep -q "rank $failing" "$log" || { echo "FAIL: the output does not name rank $failing"; exit 1; }
grep -qF -- "$expected" "$log" || { echo "FAIL: the output does not say '$expected'"; exit 1; }
echo "ok"
