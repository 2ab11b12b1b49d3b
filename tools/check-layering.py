#!/usr/bin/env python3
"""Proves that the build enforces the layering (cmake/EchelonLayers.cmake).

For every layer with sources, a probe file is compiled with exactly the flags the build uses for
that layer's own sources (from compile_commands.json): an include of each layer below it must
compile, and an include of each layer above it must FAIL ("file not found"). Exit 1 when a
planted upward include compiles, i.e. when the build would not stop a wrong arrow.

usage: tools/check-layering.py BUILD_DIR
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile

# Bottom to top; one public header per layer that the probe includes.
LAYERS = [
    ("base", "base/error.h"),
    ("kernels", "kernels/indexer.h"),
    ("cuda", "cuda/check.h"),
    ("tensor", "tensor/tensor.h"),
    ("autograd", "autograd/engine.h"),
    ("layers", "layers/module.h"),
    ("data", "data/loader.h"),
    ("parallel", "parallel/engine.h"),
    ("app", "app/train.h"),
]
# What each layer may include besides itself (data sits beside autograd/layers, above tensor).
BELOW = {
    "base": [],
    "kernels": ["base"],
    "cuda": ["base", "kernels"],
    "tensor": ["base", "kernels", "cuda"],
    "autograd": ["base", "kernels", "cuda", "tensor"],
    "layers": ["base", "kernels", "cuda", "tensor", "autograd"],
    "data": ["base", "kernels", "cuda", "tensor"],
    "parallel": ["base", "kernels", "cuda", "tensor", "autograd", "layers", "data"],
    "app": ["base", "kernels", "cuda", "tensor", "autograd", "layers", "data", "parallel"],
}


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    source = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(build, "compile_commands.json")) as f:
        commands = json.load(f)
    header = dict(LAYERS)
    failures, checked = [], 0
    for layer, _ in LAYERS:
        prefix = os.path.join(source, layer) + os.sep
        # cuda/sim/ is its own target (echelon_cudasim, emulation build only), below cuda.
        entry = next((c for c in commands if c["file"].startswith(prefix)
                      and c["file"].endswith(".cpp")
                      and not c["file"].startswith(os.path.join(source, "cuda", "sim") + os.sep)),
                     None)
        if entry is None:
            continue  # headers-only layer (kernels, cuda without CUDA)
        args = shlex.split(entry["command"]) if "command" in entry else entry["arguments"]
        # Drop the output and the source; compile the probe for syntax only.
        flags, skip = [], False
        for a in args[1:]:
            if skip:
                skip = False
                continue
            if a in ("-o", "-c"):
                skip = a == "-o"
                continue
            if a == entry["file"] or a.endswith(os.path.basename(entry["file"])):
                continue
            flags.append(a)
        compiler = args[0] if "ccache" not in args[0] else args[1]
        if compiler == args[1]:
            flags = flags[1:]
        with_cuda = any("ECHELON_WITH_CUDA" in f for f in flags)
        for other, _ in LAYERS:
            if other == layer or (other == "cuda" and not with_cuda):
                continue  # cuda's headers need the toolkit's; a CPU-only build never includes them
            expect_ok = other in BELOW[layer]
            with tempfile.NamedTemporaryFile("w", suffix=".cpp", delete=False) as probe:
                probe.write(f"#include <echelon/{header[other]}>\n")
            result = subprocess.run([compiler, *flags, "-fsyntax-only", probe.name],
                                    cwd=entry["directory"], capture_output=True, text=True)
            os.unlink(probe.name)
            checked += 1
            ok = result.returncode == 0
            if ok != expect_ok:
                verdict = "compiled" if ok else "failed"
                failures.append(f"{layer} including <echelon/{header[other]}> {verdict}"
                                + ("" if ok else ": " + result.stderr.strip().splitlines()[0]))
    for f in failures:
        print("layering: " + f)
    print(f"layering: {checked} probes, {len(failures)} wrong")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
