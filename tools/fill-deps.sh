#!/usr/bin/env bash
# Fills the ignored .deps/ folder with what the lent GPU machine lacks: the header-only
# dependencies this machine has as Debian packages (doctest, stb, CLI11, nlohmann-json, with their CMake config
# files laid out as under /usr, so the configs' relative prefixes resolve to .deps) and the probe
# script from ../shared/tools. Run it here, then name .deps in the device call's `carry`.
# Use: tools/fill-deps.sh   (from anywhere; idempotent)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
deps=$repo/.deps
mkdir -p "$deps/include" "$deps/lib/cmake" "$deps/share/cmake"

copy_dir() {  # copy_dir SRC DST: replaces DST with a copy of SRC, or warns when SRC is absent
  if [[ -d $1 ]]; then
    rm -rf "$2" && cp -r "$1" "$2" && echo "copied $1 -> ${2#"$repo"/}"
  else
    echo "warning: $1 not found (install the Debian package first)" >&2
  fi
}

copy_dir /usr/include/doctest "$deps/include/doctest"
copy_dir /usr/include/stb "$deps/include/stb"
copy_dir /usr/include/CLI "$deps/include/CLI"
copy_dir /usr/include/nlohmann "$deps/include/nlohmann"
# zlib's two headers: the GPU machine may have libz.so.1 but not zlib1g-dev.
for header in zlib.h zconf.h; do
  [[ -f /usr/include/$header ]] && cp /usr/include/$header "$deps/include/"
done
# libdeflate's header and static library (Debian's libdeflate-dev): gzip inflation at twice
# zlib's speed for the data sets' start-up (cmake/EchelonDeps.cmake finds them in .deps).
if [[ -f /usr/include/libdeflate.h && -f /usr/lib/x86_64-linux-gnu/libdeflate.a ]]; then
  cp /usr/include/libdeflate.h "$deps/include/" && cp /usr/lib/x86_64-linux-gnu/libdeflate.a "$deps/lib/"
  echo "copied libdeflate.h, libdeflate.a -> .deps"
else
  echo "warning: libdeflate-dev not installed: the GPU build inflates with zlib" >&2
fi
copy_dir /usr/lib/cmake/doctest "$deps/lib/cmake/doctest"
# Fashion-MNIST (Debian's dataset-fashion-mnist, 30 MB): issue #10's time-to-accuracy runs need
# the real data set, which the GPU machine does not have.
copy_dir /usr/share/datasets/fashion-mnist "$deps/fashion-mnist"
copy_dir /usr/share/cmake/CLI11 "$deps/share/cmake/CLI11"
copy_dir /usr/share/cmake/nlohmann_json "$deps/share/cmake/nlohmann_json"

probe=$repo/../shared/tools/gpu-probe.sh
if [[ -f $probe ]]; then
  cp "$probe" "$deps/gpu-probe.sh" && echo "copied $probe -> .deps/gpu-probe.sh"
else
  echo "warning: $probe not found; gpu-check.sh will skip the probe" >&2
fi
# doctest's generated targets file pins its prefix to /usr; make it relative to the copy.
targets=$deps/lib/cmake/doctest/doctestTargets.cmake
if [[ -f $targets ]]; then
  sed -i 's|^set(_IMPORT_PREFIX "/usr")|get_filename_component(_IMPORT_PREFIX "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)|' "$targets"
fi
du -sh "$deps" | awk '{print "total .deps: " $1}'
