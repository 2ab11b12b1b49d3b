# Sourced by tools/gpu-check.sh (its variables and functions: repo, BUILD, OUT, LOGS, row, say's
# log): finds the toolkit, cuBLAS, cuDNN, NCCL (the toolkit, system folders, or NVIDIA's Python
# wheels), compute-sanitizer, the header-only dependencies and the dataset; writes what it found
# to $LOGS/probe.txt (copied to $OUT) and sets, for the steps after it: nvcc, cuda_root,
# cmake_args, sanitizer, data_dir, LD_LIBRARY_PATH (the wheels' libraries).
# shellcheck shell=bash
probe_log=$LOGS/probe.txt
say() { printf '%-18s %s\n' "$1" "$2" | tee -a "$probe_log"; }

site_roots() {  # site-packages folders of python3, then NVIDIA_SITE
  {
    python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null
    tr ':' '\n' <<<"${NVIDIA_SITE:-}"
  } | awk 'NF && !seen[$0]++'
}
# Roots of NVIDIA's wheels: site-packages/nvidia/<name> (cudnn, nccl, cublas, cu13, ...), each
# laid out as include/ and lib/ (the CUDA 13 wheels share one root, nvidia/cu13).
wheel_roots=()
while IFS= read -r site_dir; do
  [[ -d $site_dir/nvidia ]] || continue
  for d in "$site_dir"/nvidia/*/; do
    [[ -d $d/include || -d $d/lib || -d $d/bin ]] && wheel_roots+=("${d%/}")
  done
done < <(site_roots)

lib_in() {  # lib_in DIR NAME: DIR/libNAME.so, else the first DIR/libNAME.so.<N>
  local f
  for f in "$1/lib$2.so" "$1/lib$2".so.[0-9]*; do
    [[ -e $f ]] && { echo "$f"; return 0; }
  done
  return 1
}
# locate NAME HEADER LIB ROOTS...: the first root holding both HEADER (under include/) and
# libLIB (lib64/, lib/, lib/x86_64-linux-gnu/). Sets found_inc, found_lib, found_root.
locate() {
  local name=$1 header=$2 lib=$3 root inc l i d
  shift 3
  found_inc="" found_lib="" found_root=""
  for root in "$@"; do
    [[ -n $root && -d $root ]] || continue
    inc=""
    for i in "$root/include" "$root/targets/x86_64-linux/include" "$root/include/x86_64-linux-gnu"; do
      [[ -f $i/$header ]] && { inc=$i; break; }
    done
    [[ -n $inc ]] || continue
    for d in "$root/lib64" "$root/lib" "$root/targets/x86_64-linux/lib" "$root/lib/x86_64-linux-gnu"; do
      l=$(lib_in "$d" "$lib") && { found_inc=$inc found_lib=$l found_root=$root; return 0; }
    done
  done
  echo "$name: no root holds both $header and lib$lib" >>"$probe_log"
  return 1
}
origin_of() {  # origin_of ROOT: where a root came from, for the probe's table
  local r
  for r in "${wheel_roots[@]}"; do
    [[ $1 == "$r" ]] && { echo wheel; return; }
  done
  case $1 in
    "$cuda_root") echo toolkit ;;
    /usr | /usr/local) echo system ;;
    *) echo env/other ;;
  esac
}

probe_t0=$SECONDS
: >"$probe_log"
{
  echo "gpu-check probe, $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap --format=csv,noheader 2>&1 | head -2
} >>"$probe_log"
if [[ ${ECHELON_FAKE_GPU:-0} == 1 ]]; then
  say gpu "none: ECHELON_FAKE_GPU=1 (the script's logic only)"
else
  say gpu "$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1)"
fi

nvcc=$(command -v nvcc 2>/dev/null)
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc
if [[ -z $nvcc ]]; then
  for r in "${wheel_roots[@]}"; do
    [[ -x $r/bin/nvcc ]] && { nvcc=$r/bin/nvcc; break; }
  done
fi
cuda_root=""
if [[ -n $nvcc ]]; then
  cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
  say nvcc "$nvcc ($("$nvcc" --version 2>/dev/null | grep -o 'release [0-9.]*'); root $cuda_root)"
else
  say nvcc "absent (PATH, /usr/local/cuda/bin, wheels): nothing can be built"
fi
for tool in cmake ninja g++ python3 ccache; do
  path=$(command -v "$tool" 2>/dev/null)
  say "$tool" "${path:-absent}${path:+ ($("$tool" --version 2>&1 | head -1))}"
done

# cuBLAS, cuDNN, NCCL: an explicit *_ROOT, the toolkit, system folders, then the wheels.
cmake_args=(-S . -B "$BUILD" -G Ninja -DECHELON_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
            -DCMAKE_BUILD_TYPE=Release -DECHELON_NATIVE=OFF)
[[ -n $nvcc ]] && cmake_args+=("-DCMAKE_CUDA_COMPILER=$nvcc" "-DCUDAToolkit_ROOT=$cuda_root")
extra_includes=()
declare -a lib_dirs=()
for spec in "cublas cublas_v2.h cublas CUBLAS_ROOT" "cudnn cudnn.h cudnn CUDNN_ROOT" "nccl nccl.h nccl NCCL_ROOT"; do
  read -r name header lib var <<<"$spec"
  roots=("$cuda_root" /usr /usr/local "${wheel_roots[@]}")
  [[ ${PREFER_WHEELS:-0} == 1 ]] && roots=("${wheel_roots[@]}" "$cuda_root" /usr /usr/local)
  if locate "$name" "$header" "$lib" "${!var:-}" "${roots[@]}"; then
    origin=$(origin_of "$found_root")
    [[ -n ${!var:-} && $found_root == "${!var}" ]] && origin="env"
    version=""
    [[ $name == cudnn && -f $found_inc/cudnn_version.h ]] &&
      version=" v$(awk '/#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) /{printf "%s%s", sep, $3; sep="."}' "$found_inc/cudnn_version.h")"
    [[ $name == nccl ]] &&
      version=" v$(awk '/#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' "$found_inc/nccl.h")"
    say "$name" "$origin$version: $found_lib (headers $found_inc)"
    case $name in
      cublas)
        if [[ $origin != toolkit ]]; then
          # CMake's CUDA::cublas looks only in the toolkit: hand it the files.
          lt=$(lib_in "$(dirname "$found_lib")" cublasLt)
          cmake_args+=("-DCUDA_cublas_LIBRARY=$found_lib")
          [[ -n $lt ]] && cmake_args+=("-DCUDA_cublasLt_LIBRARY=$lt")
          extra_includes+=("$found_inc")
        fi
        ;;
      # The files themselves, not only a root: a cached result of an earlier configure of the
      # same build folder would otherwise win.
      cudnn) cmake_args+=("-DCUDNN_ROOT=$found_root" "-DCUDNN_INCLUDE_DIR=$found_inc" "-DCUDNN_LIBRARY=$found_lib") ;;
      nccl) cmake_args+=("-DNCCL_ROOT=$found_root" "-DNCCL_INCLUDE_DIR=$found_inc" "-DNCCL_LIBRARY=$found_lib") ;;
    esac
    [[ $origin != toolkit && $origin != system ]] && lib_dirs+=("$(dirname "$found_lib")")
  else
    say "$name" "absent (looked in \$$var, the toolkit, /usr, /usr/local and ${#wheel_roots[@]} wheel folders)"
  fi
done
if ((${#extra_includes[@]})); then
  flags=$(printf -- '-isystem %s ' "${extra_includes[@]}")
  cmake_args+=("-DCMAKE_CXX_FLAGS=$flags" "-DCMAKE_CUDA_FLAGS=$flags")
fi
if ((${#lib_dirs[@]})); then
  # The wheels' libraries (and the ones they dlopen, e.g. cuDNN's sub-libraries) at run time.
  LD_LIBRARY_PATH=$(printf '%s:' "${lib_dirs[@]}")${LD_LIBRARY_PATH:-}
  export LD_LIBRARY_PATH
fi

sanitizer=$(command -v compute-sanitizer 2>/dev/null)
if [[ -z $sanitizer ]]; then
  for c in "$cuda_root/bin/compute-sanitizer" "$cuda_root/compute-sanitizer/compute-sanitizer" \
           /usr/local/cuda*/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer* /opt/nvidia/*/*/compute-sanitizer; do
    [[ -f $c && -x $c ]] && { sanitizer=$c; break; }
  done
fi
if [[ -z $sanitizer ]]; then
  for r in "${wheel_roots[@]}"; do
    sanitizer=$(find "$r" -maxdepth 3 -name compute-sanitizer -type f -perm -u+x 2>/dev/null | head -1)
    [[ -n $sanitizer ]] && break
  done
fi
say compute-sanitizer "${sanitizer:-absent: the memcheck/racecheck steps are skipped}${sanitizer:+ ($("$sanitizer" --version 2>/dev/null | grep -io 'version [0-9.]*' | head -1))}"

# Header-only dependencies and optional libraries.
if [[ -d .deps/include ]]; then
  cmake_args+=("-Ddoctest_DIR=$repo/.deps/lib/cmake/doctest" "-DCLI11_DIR=$repo/.deps/share/cmake/CLI11"
               "-DCMAKE_PREFIX_PATH=$repo/.deps")
  say deps ".deps: $(find .deps/include -mindepth 1 -maxdepth 1 -printf '%f ')"
else
  say deps ".deps absent: run tools/fill-deps.sh here and carry .deps (doctest/CLI11 may be missing)"
fi
# OpenBLAS and zlib may lack their -dev packages there.
if [[ ! -f /usr/include/cblas.h && ! -d /usr/include/x86_64-linux-gnu/openblas-pthread ]]; then
  cmake_args+=(-DECHELON_BLAS=OFF)
  say openblas "absent: CPU twins run naive"
fi
if [[ ! -f /usr/include/zlib.h && -f .deps/include/zlib.h ]]; then
  zlib_so=$(find /lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu -maxdepth 1 -name 'libz.so*' 2>/dev/null | sort | head -1)
  [[ -n $zlib_so ]] && cmake_args+=("-DZLIB_INCLUDE_DIR=$repo/.deps/include" "-DZLIB_LIBRARY=$zlib_so")
  say zlib "headers from .deps, library ${zlib_so:-absent}"
fi
data_dir=/usr/share/datasets/fashion-mnist
# Carried from the dev machine by tools/fill-deps.sh when the GPU machine lacks the package.
[[ -d $data_dir || ! -d $repo/.deps/fashion-mnist ]] || data_dir=$repo/.deps/fashion-mnist
if [[ -d $data_dir ]]; then
  say datasets "$data_dir present"
else
  say datasets "$data_dir absent: synthetic data"
fi
say wheels "${#wheel_roots[@]} NVIDIA wheel folders: $(printf '%s ' "${wheel_roots[@]##*/}")"
{
  printf 'cmake'
  printf ' %q' "${cmake_args[@]}"
  echo
} >>"$probe_log"
cp "$probe_log" "$OUT/probe.txt"
row probe ok $((SECONDS - probe_t0)) "probe.txt"
