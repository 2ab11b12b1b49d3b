#!/usr/bin/env bash
# 2 single-thread processes (mpirun) vs 2 threads of one process vs ordinary training, stale
# pipeline, same cut; prints each run's epoch-2 line (training images/s) and CPU/wall time.
# Needs build-cpu with MPI (bench/RESULTS.md, "Pipeline across processes"). MODEL=resnet20 for
# ResNet-20 (512 images, batch 64, cut 6).
cd "$(dirname "$0")/.."
E=build-cpu/echelon
if [ "${MODEL:-lenet5}" = resnet20 ]; then
  flags=(train --model resnet20 --data synthetic --limit-train 512 --limit-test 64 --batch-size 64
         --epochs 2 --threads 1 --progress none)
  pipe=(--pipeline 2 --ppv 6 --schedule-pipeline stale)
else
  flags=(train --model lenet5 --data synthetic --limit-train 8192 --limit-test 256 --batch-size 128
         --epochs 2 --threads 1 --progress none)
  pipe=(--pipeline 2 --ppv 3 --schedule-pipeline stale)
fi
export OPENBLAS_NUM_THREADS=1
for round in $(seq 1 "${ROUNDS:-2}"); do
  echo "== round $round, load $(cut -d' ' -f1 /proc/loadavg)"
  echo "-- 1 process, ordinary training"
  /usr/bin/time -f "%e s wall, %U s user + %S s sys" $E "${flags[@]}" 2>&1 | grep -E "epoch 2/2|wall"
  echo "-- 1 process, 2 threads (stale)"
  /usr/bin/time -f "%e s wall, %U s user + %S s sys" $E "${flags[@]}" "${pipe[@]}" 2>&1 | grep -E "epoch 2/2|wall"
  echo "-- 2 processes (mpirun, stale)"
  /usr/bin/time -f "%e s wall, %U s user + %S s sys" tests/mpi/mpirun.sh 300 2 $E "${flags[@]}" "${pipe[@]}" 2>&1 | grep -E "epoch 2/2|wall"
done
