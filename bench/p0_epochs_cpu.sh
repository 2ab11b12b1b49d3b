#!/usr/bin/env bash
# How many epochs LeNet-5 needs to reach 90% Fashion-MNIST test accuracy under a few cosine
# recipes (issue #10 P0), on the CPU: one line per recipe, test accuracy per epoch.
#   bash bench/p0_epochs_cpu.sh          the batch size / LR / cosine length recipes (seed 0)
#   bash bench/p0_epochs_cpu.sh --ema    with and without a moving average of the weights
#                                        (--ema 0.99), seeds 0-4, on resident data
#   bash bench/p0_epochs_cpu.sh --batch256   gpu-check's batch-128 P0 recipe against its
#                                        batch-256 one, seeds 0-7, on resident data
#   bash bench/p0_epochs_cpu.sh --lr     the batch-128 recipe with --ema at other learning
#                                        rates, decays and warm-ups, seeds 0-5
cd "$(dirname "$0")/.." || exit 1
run() {
  local label=$1; shift
  out=$(OPENBLAS_NUM_THREADS=1 nice build-cpu/echelon train --model lenet5 --data fashion-mnist --device cpu --threads 1 \
    --lr-schedule cosine --target-accuracy 0.9 --momentum 0.9 --nesterov --progress none --log-every 0 \
    --overwrite --out /tmp/p0s "$@" 2>&1)
  echo "$label: $(grep -o 'reached .*at epoch [0-9]*' <<<"$out" | head -1) | $(grep '^epoch' <<<"$out" | grep -o 'test loss [0-9.]* acc [0-9.]*%' | tr '\n' ';')"
}
if [[ ${1:-} == --ema ]]; then
  for seed in 0 1 2 3 4; do
    for recipe in "0 8" "0.99 8" "0.99 6" "0.99 5"; do
      read -r ema epochs <<<"$recipe"
      run "seed $seed ema $ema cosine over $epochs" --resident-data --batch-size 128 --lr 0.05 \
        --warmup-epochs 0.5 --seed "$seed" --ema "$ema" --epochs "$epochs"
    done
  done
  exit 0
fi
if [[ ${1:-} == --batch256 ]]; then
  for seed in 0 1 2 3 4 5 6 7; do
    run "seed $seed b128 lr 0.05 ema 0.99 cosine over 5, warm-up 0.5" --resident-data \
      --batch-size 128 --lr 0.05 --warmup-epochs 0.5 --seed "$seed" --ema 0.99 --epochs 5
    run "seed $seed b256 lr 0.1 ema 0.98 cosine over 6, warm-up 1" --resident-data \
      --batch-size 256 --lr 0.1 --warmup-epochs 1 --seed "$seed" --ema 0.98 --epochs 6
  done
  exit 0
fi
if [[ ${1:-} == --lr ]]; then
  for seed in 0 1 2 3 4 5; do
    for recipe in "0.03 0.99 0.5" "0.07 0.99 0.5" "0.1 0.99 0.5" "0.05 0.98 0.5" "0.05 0.99 0.25" \
                  "0.05 0.99 0" "0.07 0.98 0.25"; do
      read -r lr ema warmup <<<"$recipe"
      run "seed $seed lr $lr ema $ema warm-up $warmup" --resident-data --batch-size 128 \
        --lr "$lr" --warmup-epochs "$warmup" --seed "$seed" --ema "$ema" --epochs 5
    done
  done
  exit 0
fi
run "A b128 lr.05 e8 w.5" --batch-size 128 --lr 0.05 --epochs 8 --warmup-epochs 0.5
run "B b128 lr.05 e4 w.5" --batch-size 128 --lr 0.05 --epochs 4 --warmup-epochs 0.5
run "C b128 lr.1 e4 w.5" --batch-size 128 --lr 0.1 --epochs 4 --warmup-epochs 0.5
run "D b128 lr.1 e3 w.3" --batch-size 128 --lr 0.1 --epochs 3 --warmup-epochs 0.3
run "E b64 lr.05 e3 w.3" --batch-size 64 --lr 0.05 --epochs 3 --warmup-epochs 0.3
run "F b128 lr.05 e3 w.3" --batch-size 128 --lr 0.05 --epochs 3 --warmup-epochs 0.3
