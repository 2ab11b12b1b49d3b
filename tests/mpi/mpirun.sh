#!/usr/bin/env bash
# mpirun on this machine only (loopback TCP), bounded in time: tests/mpi/mpirun.sh SECONDS NP CMD...
# --oversubscribe: CI has 2 cores but tests start up to 4 processes.
set -u
limit=$1 np=$2
shift 2
exec timeout --signal=TERM --kill-after=10 "$limit" "${ECHELON_MPIRUN:-mpirun}" --allow-run-as-root \
  --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo \
  --mca oob_tcp_if_include lo -np "$np" "$@"
