#!/usr/bin/env bash
# Installs the Debian packages Echelon builds and tests with, only those that are missing.
# python3-pil is for one test (tests/pillow_cmyk.sh: our CMYK JPEG decode against Pillow's);
# valgrind replays the fuzz corpora (label valgrind, builds without sanitizers or CUDA).
# The CUDA toolkit is not installed here: when /usr/local/cuda/bin/nvcc exists the build uses it,
# otherwise Echelon builds CPU-only.
set -euo pipefail
packages=(cmake ninja-build g++ make pkg-config ccache zlib1g-dev libdeflate-dev doctest-dev libcli11-dev
          nlohmann-json3-dev libopenblas-dev libstb-dev libturbojpeg0-dev libbenchmark-dev
          dataset-fashion-mnist libboost-context-dev openmpi-bin libopenmpi-dev
          python3-pil valgrind)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "echelon: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
