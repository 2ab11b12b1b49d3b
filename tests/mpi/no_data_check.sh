#!/usr/bin/env bash
# A later partition's process loads no data: under mpirun -np 2, rank 1 is pointed at a data
# folder that does not exist (rank 0 at a small Fashion-MNIST in IDX files), and the run must
# still succeed, bit-identical (checkpoint, training and test metrics) to the threaded pipeline on
# the real folder; rank 1's own trace has no data loader track (rank 0's has). Three cases:
# stale; fractional echo (the batch count is drawn at random) with gpipe; --resident-data with
# hybrid. And an image folder whose train/ holds no image in rank 1's copy.
# usage: no_data_check.sh ECHELON PIPELINE_MPI_CHECK
set -u
echelon=$1 check=$2
here=$(dirname "$0")
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$dir/data"
python3 - "$dir/data" <<'PY'
import random, struct, sys
rng = random.Random(5)
for split, n in (("train", 300), ("t10k", 70)):
    labels = [rng.randrange(10) for _ in range(n)]
    # the label shifts the mean brightness, so there is something to learn
    pixels = bytes(min(255, rng.randrange(128) + 12 * labels[i // 784]) for i in range(n * 784))
    with open(f"{sys.argv[1]}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + pixels)
    with open(f"{sys.argv[1]}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(labels))
PY

common=(train --model lenet5 --data fashion-mnist --batch-size 32 --epochs 2 --lr 0.05 --pipeline 2
        --deterministic --threads 1 --progress none)
# Rank 1 gets a folder that does not exist; rank 0 the real one.
per_rank='if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then d=$DATA; else d=$DATA.missing; fi
exec "$@" --data-dir "$d"'

for case in "stale" "gpipe --echo 1.5" "hybrid --resident-data"; do
  read -r schedule extra <<<"$case"
  flags=("${common[@]}" --schedule-pipeline "$schedule" $extra)
  name=${schedule}
  "$echelon" "${flags[@]}" --data-dir "$dir/data" --out "$dir/$name-threads" \
    >"$dir/$name-threads.log" 2>&1 || { cat "$dir/$name-threads.log"; fail "$case: threaded run"; }
  DATA="$dir/data" "$here/mpirun.sh" 120 2 -x DATA sh -c "$per_rank" sh "$echelon" "${flags[@]}" \
    --out "$dir/$name-procs" --trace "$dir/$name-trace.json" >"$dir/$name-procs.log" 2>&1 \
    || { cat "$dir/$name-procs.log"; fail "$case: 2 processes, rank 1 without data"; }
  "$check" --compare "$dir/$name-procs/checkpoint.safetensors" \
    "$dir/$name-threads/checkpoint.safetensors" || fail "$case: 2 processes and 2 threads differ"
  for run in threads procs; do
    grep -o '"train_loss":[^,]*,"train_acc":[^,]*\|"test_loss":[^,]*,"test_acc":[^,]*\|"train_images":[0-9]*' \
      "$dir/$name-$run/metrics.jsonl" >"$dir/$name-$run.metrics"
  done
  [ -s "$dir/$name-threads.metrics" ] || fail "$case: no metrics"
  cmp -s "$dir/$name-threads.metrics" "$dir/$name-procs.metrics" ||
    { diff "$dir/$name-threads.metrics" "$dir/$name-procs.metrics"; fail "$case: metrics differ"; }
  grep -q 'data loader' "$dir/$name-trace.json.rank1" && fail "$case: rank 1 ran a data loader"
  if [ "$extra" != --resident-data ]; then
    grep -q 'rank 0: data loader' "$dir/$name-trace.json" || fail "$case: rank 0's loader left no track"
  fi
  echo "$case: rank 1 read no data; bit-identical to 2 threads ($(tr '\n' ' ' <"$dir/$name-procs.metrics"))"
done

# An image folder: rank 1 lists only the test split (the class names come from train/'s folder
# names), so it gets a copy whose train/ class folders are empty.
python3 - "$dir/folder" <<'PY'
import os, random, struct, sys
rng = random.Random(3)
def bmp(path, label):  # 28x28 24-bit BMP whose brightness depends on the label
    rows = b"".join(bytes(min(255, rng.randrange(100) + 60 * label) for _ in range(84))
                    for _ in range(28))
    header = struct.pack("<2sIHHI", b"BM", 54 + len(rows), 0, 0, 54)
    info = struct.pack("<IiiHHIIiiII", 40, 28, 28, 1, 24, 0, len(rows), 2835, 2835, 0, 0)
    with open(path, "wb") as f:
        f.write(header + info + rows)
for split, n in (("train", 40), ("test", 12)):
    for label, name in enumerate(("a", "b", "c")):
        os.makedirs(f"{sys.argv[1]}/{split}/{name}")
        for i in range(n):
            bmp(f"{sys.argv[1]}/{split}/{name}/{i}.bmp", label)
PY
mkdir -p "$dir/folder.missing/train"
cp -r "$dir/folder/test" "$dir/folder.missing/"
for name in a b c; do mkdir "$dir/folder.missing/train/$name"; done
flags=(train --model lenet5 --data folder --batch-size 16 --epochs 1 --lr 0.05 --pipeline 2
       --deterministic --threads 1 --progress none)
"$echelon" "${flags[@]}" --data-dir "$dir/folder" --out "$dir/folder-threads" \
  >"$dir/folder-threads.log" 2>&1 || { cat "$dir/folder-threads.log"; fail "folder: threaded run"; }
DATA="$dir/folder" "$here/mpirun.sh" 120 2 -x DATA sh -c "$per_rank" sh "$echelon" "${flags[@]}" \
  --out "$dir/folder-procs" >"$dir/folder-procs.log" 2>&1 \
  || { cat "$dir/folder-procs.log"; fail "folder: 2 processes, rank 1 without train/ images"; }
"$check" --compare "$dir/folder-procs/checkpoint.safetensors" \
  "$dir/folder-threads/checkpoint.safetensors" || fail "folder: 2 processes and 2 threads differ"
echo "image folder: rank 1 listed no training image; bit-identical to 2 threads"
echo "ok"
