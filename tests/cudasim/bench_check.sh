#!/usr/bin/env bash
# `echelon bench op|model|pipeline|loader --device cuda` on the emulated cuda:0, at sizes the
# emulator runs in seconds: each must exit 0, print its table and write --json naming cuda:0
# with the fields a user reads (times > 0, one entry per layer / partition / loader stage).
#   bench_check.sh ECHELON_BINARY OUT_DIR
set -euo pipefail
bin=$1 out=$2
command -v python3 > /dev/null || { echo "bench_check: no python3 to read the JSON"; exit 77; }
rm -rf "$out" && mkdir -p "$out"
bench() {  # name args...
  local name=$1; shift
  echo "== echelon bench $*"
  "$bin" bench "$@" --device cuda --json "$out/$name.json" | tee "$out/$name.txt"
}
bench op_matmul op matmul --input 16,16 --warmup 1 --repeats 2
bench op_conv2d op conv2d --input 2,3,8,8 --out-channels 4 --warmup 1 --repeats 2
bench model model lenet5 --batch-size 2 --per-layer --warmup 0 --repeats 1
bench pipeline pipeline --model lenet5 --pipeline 2 --schedule stale --batch-size 2 --warmup 1 \
  --steps 2
bench loader loader --data synthetic --limit 64 --workers 1 --echo 2
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def load(name):
    j = json.load(open(f"{out}/{name}.json"))
    assert j["device"] == "cuda:0", (name, j["device"])
    return j
for name, impls in (("op_matmul", {"cublas", "ours"}), ("op_conv2d", {"ours"})):
    j = load(name)
    assert {i["impl"] for i in j["impls"]} >= impls, (name, j["impls"])
    for impl in j["impls"]:
        assert len(impl["passes"]) == 3, impl
        for p in impl["passes"]:
            t = p["time"]
            assert 0 < t["min_ms"] <= t["median_ms"] <= t["max_ms"], p
m = load("model")
assert len(m["layers"]) == 12, len(m["layers"])  # LeNet-5's flat layers
assert all(l["forward"]["median_ms"] > 0 and l["backward"]["median_ms"] >= 0 for l in m["layers"])
assert abs(sum(l["share"] for l in m["layers"]) - 1) < 1e-6
p = load("pipeline")
assert len(p["partitions"]) == 2 and p["images_per_s"] > 0 and p["single_images_per_s"] > 0, p
# Busy time is device time (each op waits for its stream): host launch time alone gave ~0.1%.
assert all(x["utilisation"] >= 0.02 for x in p["partitions"]), [x["utilisation"] for x in p["partitions"]]
l = load("loader")
assert l["items"] == 128 and l["items_per_s"] > 0, l  # 64 examples echoed twice
print("bench_check: op, model, pipeline, loader on emulated cuda:0: ok")
PY
