#!/usr/bin/env bash
# A stand-in for Nsight Compute's ncu, for ctest's gpu_profile_* cases (tools/gpu-profile.sh on a
# machine without a GPU). Profiling (`ncu [options] -o REPORT DRIVER ARGS...`) runs the driver,
# which in a build without a GPU only writes its --subjects-out file, and writes REPORT.ncu-rep as
# the raw CSV real ncu would give for it: a marker row before each subject and after the last,
# one kernel per subject (two for a weight gradient), a column per requested metric.
# `ncu --import REPORT.ncu-rep --csv ...` prints that CSV.
#   FAKE_NCU_REFUSE=METRIC  fail like ncu does when METRIC is requested
#   FAKE_NCU_DROP_MARKER=1  leave out the closing marker (the table must say it cannot split)
set -uo pipefail
if [[ ${1:-} == --import ]]; then
  cat "$2"
  exit 0
fi
metrics="" report="" 
while (($#)); do
  case $1 in
    --metrics) metrics=$2; shift 2 ;;
    -o) report=$2; shift 2 ;;
    --clock-control | --profile-from-start) shift 2 ;;
    -f) shift ;;
    *) break ;;
  esac
done
if [[ -n ${FAKE_NCU_REFUSE:-} && ,$metrics, == *,$FAKE_NCU_REFUSE,* ]]; then
  echo "==ERROR== Failed to find metric $FAKE_NCU_REFUSE"
  exit 1
fi
"$@" || exit $?
subjects=""
for ((i = 1; i <= $#; i++)); do
  [[ ${!i} == --subjects-out ]] && { j=$((i + 1)); subjects=${!j}; }
done
python3 - "$metrics" "$subjects" "$report.ncu-rep" "${FAKE_NCU_DROP_MARKER:-0}" <<'PY'
import csv, sys
metrics, subjects_path, report, drop = sys.argv[1].split(","), sys.argv[2], sys.argv[3], sys.argv[4]
subjects = [s.strip() for s in open(subjects_path) if s.strip()]
head = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
        "Block Size", "Grid Size", "Device", "CC"]
marker = "void echelon::cuda::(anonymous namespace)::unary_kernel<float>(const float *, float *, long)"
rows = []
def kernel(name, grid, k):
    values = {m: f"{(k * 7 + i) % 97 + 1},000.5" if m == "gpu__time_duration.sum" else str((k + i) % 9 + 1)
              for i, m in enumerate(metrics)}
    rows.append([str(len(rows)), "1", "exp_gpu_profile", "127.0.0.1", name, "1", "13",
                 "(256, 1, 1)", grid, "0", "9.0"] + [values[m] for m in metrics])
for k, s in enumerate(subjects):
    kernel(marker, "(1, 1, 1)", 0)
    kernel(f"void echelon::cuda::sgemm_mma_kernel<float, {k}>(echelon::cuda::Gemm)", f"({k + 1}, 32, 1)", k)
    if s.startswith("step "):  # a training step: repeated kernels, summed by name in the table
        for j in range(3):
            kernel("void echelon::cuda::relu_kernel(const float *, float *, long)", "(8, 1, 1)", k + j)
    if "bwd-w" in s:
        kernel("void echelon::cuda::split_k_reduce_kernel(const float *, float *, long, int)", "(64, 1, 1)", k)
if drop != "1":
    kernel(marker, "(1, 1, 1)", 0)
with open(report, "w", newline="") as f:
    w = csv.writer(f, quoting=csv.QUOTE_ALL)
    w.writerow(head + metrics)
    w.writerow([""] * len(head) + ["" for _ in metrics])
    w.writerows(rows)
PY
