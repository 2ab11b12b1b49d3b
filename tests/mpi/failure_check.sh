#!/usr/bin/env bash
# A process of a multi-process run fails; every process must end, non-zero, within 30 s, and the
# output must name the failing rank.
#   failure_check.sh error PIPELINE_MPI_CHECK   rank 1 throws after two steps
set -u
here=$(dirname "$0")
check=$2
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$here/mpirun.sh" 60 2 "$check" --partitions 2 --fail-rank 1 --schedules stale >"$log" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
cat "$log"
echo "exit status $rc after ${elapsed} s"
[ "$rc" -ne 0 ] || { echo "FAIL: the run exited 0"; exit 1; }
[ "$rc" -ne 124 ] && [ "$rc" -ne 137 ] || { echo "FAIL: the run hung until timeout"; exit 1; }
[ "$elapsed" -le 30 ] || { echo "FAIL: took ${elapsed} s (> 30 s)"; exit 1; }
grep -q "rank 1" "$log" || { echo "FAIL: the output does not name rank 1"; exit 1; }
echo "ok"
