#!/usr/bin/env python3
"""Static resource report of every CUDA kernel in a build: registers, local memory, shared memory
and the theoretical occupancy on an sm_90 GPU (H100 / H200), read from the compiled objects.

  python3 tools/cuda-resources.py BUILD_DIR            # the table; exit 1 if a kernel spills
  python3 tools/cuda-resources.py BUILD_DIR --ptxas    # also recompile each .cu with -Xptxas -v
                                                       # for ptxas' own spill-store/load bytes
  python3 tools/cuda-resources.py BUILD_DIR --objects a.cu.o ...   # only these objects

What it reads: the sm_90 cubins embedded in BUILD_DIR's CUDA objects (the `.nv_fatbin` section of
each `*.cu.o`), parsed here (no cuobjdump needed: the toolkit on the dev machine lacks it). Per
kernel, from the cubin's .nv.info attributes: registers (EIATTR_REGCOUNT), the stack frame
(EIATTR_FRAME_SIZE: per-thread local memory, where ptxas puts spilled registers and local arrays),
__launch_bounds__ (EIATTR_MAX_THREADS); static shared memory is the size of .nv.shared.<kernel>.
A frame of 0 bytes proves there is no spill. For a kernel whose frame is not 0, its .cu is
compiled once more with -Xptxas -v (the command from compile_commands.json, a cubin into a temporary
folder: a few seconds a file) for ptxas' own count of spill-store and spill-load bytes: spills fail
the check (exit 1); a frame without spills (a local array, e.g. libdevice's sin/cos slow-path
reduction table, or a kernel argument's array indexed at run time) is listed, not failed.
--ptxas does that for every object, and also checks that ptxas' registers and shared memory agree
with what this script read from the object.

Block sizes come from the launch sites in cuda/ (launch_1d: kBlock; ECH_LAUNCH / ECH_LAUNCH_NAMED:
their block argument, resolved through `constexpr int` constants and `dim3 name(x, y)` in the
source); a kernel's __launch_bounds__ is used when no launch site resolves, and the column says
which. A kernel with neither reads "?" and gets no occupancy.

Occupancy is computed as cuda_occupancy.h (the CUDA occupancy calculator) does for compute
capability 9.0: 64 warps and 32 blocks per SM; registers allocated per warp in units of 256,
65536 per SM split over 4 sub-partitions (a block needs its warps' registers within them);
shared memory allocated in units of 128 bytes plus 1 KiB reserved per block, 228 KiB per SM (the
driver picks the largest carve-out when the kernel needs it), 227 KiB at most per block.
"""
import argparse
import json
import re
import shlex
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# sm_90 (H100, H200): cudaOccDeviceProp values and cuda_occupancy.h's per-architecture constants.
MAX_WARPS_SM, MAX_BLOCKS_SM, WARP = 64, 32, 32
REGS_SM, REGS_BLOCK, REG_UNIT, SUB_PARTITIONS, MAX_REGS_THREAD = 65536, 65536, 256, 4, 255
SMEM_SM, SMEM_BLOCK_MAX, SMEM_RESERVED, SMEM_UNIT = 228 * 1024, 227 * 1024, 1024, 128

EIATTR_MAX_THREADS, EIATTR_FRAME_SIZE, EIATTR_REGCOUNT = 0x05, 0x11, 0x2F
EM_CUDA = 190


def round_up(x, unit):
    return (x + unit - 1) // unit * unit


def occupancy(block, regs, smem):
    """(blocks per SM, limiter) for one kernel, as cudaOccMaxActiveBlocksPerMultiprocessor."""
    warps = (block + WARP - 1) // WARP
    limits = {"warps": min(MAX_BLOCKS_SM, MAX_WARPS_SM // warps)}
    regs_warp = round_up(max(regs, 1) * WARP, REG_UNIT)
    if regs > MAX_REGS_THREAD or regs_warp * round_up(warps, SUB_PARTITIONS) > REGS_BLOCK:
        limits["regs"] = 0
    else:
        limits["regs"] = (REGS_SM // SUB_PARTITIONS // regs_warp) * SUB_PARTITIONS // warps
    smem_alloc = round_up(smem + SMEM_RESERVED, SMEM_UNIT)
    limits["smem"] = 0 if smem > SMEM_BLOCK_MAX else SMEM_SM // smem_alloc
    blocks = min(limits.values())
    limiter = "+".join(k for k, v in limits.items() if v == blocks)
    return blocks, warps, limiter


# ---- cubins out of host objects -------------------------------------------------------------------
def elf_sections(data):
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = sections[shstrndx][4]

    def name(off):
        return data[names_at + off:data.index(b"\0", names_at + off)].decode()

    # (name, type, offset, size, link, info)
    return [(name(s[0]), s[1], s[4], s[5], s[6], s[7]) for s in sections]


def fatbin_cubins(fatbin):
    """The ELF (cubin) entries of a fatbinary; compressed entries are reported, not skipped."""
    cubins, pos = [], 0
    while pos + 16 <= len(fatbin):
        magic, _, header, size = struct.unpack_from("<IHHQ", fatbin, pos)
        if magic != 0xBA55ED50:
            break
        entry, end = pos + header, pos + header + size
        while entry < end:
            kind, _, entry_header, payload = struct.unpack_from("<HHIQ", fatbin, entry)
            arch = struct.unpack_from("<I", fatbin, entry + 28)[0]
            flags = struct.unpack_from("<Q", fatbin, entry + 40)[0]
            body = fatbin[entry + entry_header:entry + entry_header + payload]
            if kind == 2:  # an ELF image
                if flags & 0x2000 or body[:4] != b"\x7fELF":
                    raise SystemExit(f"compressed cubin (sm_{arch}) in the fatbinary: build with "
                                     "nvcc -no-compress to read it")
                cubins.append((arch, body))
            entry += entry_header + payload
        pos = end
    return cubins


def host_fatbin(obj):
    data = obj.read_bytes()
    for name, _, off, size, _, _ in elf_sections(data):
        if name == ".nv_fatbin":
            return data[off:off + size]
    return b""


def cubin_kernels(cubin):
    """{mangled name: {regs, frame, smem, max_threads}} of the kernels (.text.<name>) of a cubin."""
    if struct.unpack_from("<H", cubin, 0x12)[0] != EM_CUDA:
        raise SystemExit("not a CUDA ELF image")
    sections = elf_sections(cubin)
    symtab = next(s for s in sections if s[1] == 2)
    strtab = sections[symtab[4]]
    symbols = []
    for i in range(symtab[3] // 24):
        st_name = struct.unpack_from("<I", cubin, symtab[2] + i * 24)[0]
        start = strtab[2] + st_name
        symbols.append(cubin[start:cubin.index(b"\0", start)].decode())

    kernels = {s[0][len(".text."):]: {"regs": 0, "frame": 0, "smem": 0, "max_threads": None}
               for s in sections if s[0].startswith(".text.")}

    def attributes(off, size):  # .nv.info entries: (format, attribute, value bytes)
        end = off + size
        while off < end:
            fmt, attr = cubin[off], cubin[off + 1]
            if fmt == 4:  # EIFMT_SVAL: 16-bit size, then the value
                n = struct.unpack_from("<H", cubin, off + 2)[0]
                yield attr, cubin[off + 4:off + 4 + n]
                off += 4 + n
            elif fmt in (2, 3):  # EIFMT_BVAL / HVAL: the value inline
                yield attr, cubin[off + 2:off + 4]
                off += 4
            else:  # EIFMT_NVAL: a flag
                off += 2

    has_reserved = any(s[0] == ".nv.shared.reserved.0" for s in sections)
    for name, _, off, size, _, _ in sections:
        if name == ".nv.info":  # per-symbol (symbol index, value) pairs
            for attr, value in attributes(off, size):
                if attr in (EIATTR_REGCOUNT, EIATTR_FRAME_SIZE) and len(value) == 8:
                    sym, v = struct.unpack("<II", value)
                    if symbols[sym] in kernels:
                        kernels[symbols[sym]]["regs" if attr == EIATTR_REGCOUNT else "frame"] = v
        elif name.startswith(".nv.info."):
            kernel = kernels.get(name[len(".nv.info."):])
            for attr, value in attributes(off, size):
                if kernel is not None and attr == EIATTR_MAX_THREADS and len(value) == 12:
                    x, y, z = struct.unpack("<III", value)
                    kernel["max_threads"] = x * y * z
        elif name.startswith(".nv.shared.") and name[len(".nv.shared."):] in kernels:
            # The section starts with the 1 KiB the system reserves per block (sm_80 and newer:
            # the symbol __nv_reservedSMEM_offset_0_alias); ptxas and cudaFuncAttributes count
            # without it and the occupancy adds it back.
            reserved = SMEM_RESERVED if has_reserved and size >= SMEM_RESERVED else 0
            kernels[name[len(".nv.shared."):]]["smem"] = size - reserved
    return kernels


# ---- names and launch sites -------------------------------------------------------------------------
def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def short_name(demangled):
    """'void echelon::cuda::(anonymous namespace)::k<T>(args)' -> ('k<T>', 'k')."""
    s = demangled.removeprefix("void ").replace("(anonymous namespace)::", "")
    depth = 0
    for i, c in enumerate(s):
        depth += c == "<"
        depth -= c == ">"
        if c == "(" and depth == 0:
            s = s[:i]
            break
    s = re.sub(r"\bechelon::cuda::(tile::)?|\bechelon::", "", s)
    depth, base = 0, ""
    for c in s:
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif depth == 0:
            base += c
    return s, base.split("::")[-1]


def split_args(text):
    """The comma-separated arguments of a call whose '(' opened just before text."""
    args, depth, cur = [], 0, ""
    for c in text:
        if c in "(<[{":
            depth += 1
        elif c in ")>]}":
            if depth == 0:
                args.append(cur.strip())
                return args
            depth -= 1
        if c == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
        else:
            cur += c
    return args


def launch_sites(repo):
    """{kernel base name: {block expression -> resolved int or None}} from the sources in cuda/."""
    files = [p for p in sorted((repo / "cuda").rglob("*")) if p.suffix in (".cu", ".cuh", ".cpp", ".h")
             and "sim" not in p.relative_to(repo / "cuda").parts]
    constants = {}
    for p in files:
        for line in p.read_text().splitlines():
            if re.match(r"\s*(inline\s+)?(static\s+)?constexpr\s+(int|int64_t|unsigned)\b", line):
                for name, value in re.findall(r"\b(\w+)\s*=\s*(\d+)\b", line):
                    constants.setdefault(name, int(value))
    sites = {}
    calls = {"launch_1d": (None, 3), "ECH_LAUNCH": (1, 4), "ECH_LAUNCH_NAMED": (2, 5)}
    for p in files:
        text = p.read_text()
        dims = {n: (a, b) for n, a, b in re.findall(r"\bdim3\s+(\w+)\((\w+),\s*(\w+)\)", text)}

        def resolve(expr):
            if expr.isdigit():
                return int(expr)
            if expr in constants:
                return constants[expr]
            if expr in dims:
                x, y = (resolve(e) for e in dims[expr])
                return x * y if x and y else None
            return None

        for m in re.finditer(r"(?<!define )\b(launch_1d|ECH_LAUNCH_NAMED|ECH_LAUNCH)\(", text):
            block_at, kernel_at = calls[m.group(1)]
            args = split_args(text[m.end():])
            if len(args) <= kernel_at:
                continue
            kernel = re.sub(r"<.*", "", args[kernel_at].strip("() ")).split("::")[-1]
            block = "kBlock" if block_at is None else args[block_at]
            sites.setdefault(kernel, {})[block] = resolve(block)
    return sites


# ---- ptxas -v, for the spill bytes -------------------------------------------------------------------
def ptxas_spills(build, objects):
    """{demangled: {spill: (stores, loads), regs, smem}}: each object's .cu compiled again with
    -Xptxas -v. Keyed by the demangled name: an anonymous namespace's mangled id differs between
    two compilations of one file."""
    database = build / "compile_commands.json"
    if not database.exists():
        print(f"cuda-resources: no {database}: spill bytes unknown")
        return {}
    commands = json.loads(database.read_text())
    wanted = {o.resolve() for o in objects}
    result = {}
    for c in commands:
        argv = shlex.split(c["command"])
        if argv and "ccache" in Path(argv[0]).name:
            argv = argv[1:]
        out = argv.index("-o") if "-o" in argv else -1
        if out < 0 or (Path(c["directory"]) / argv[out + 1]).resolve() not in wanted:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            argv[out + 1] = str(Path(tmp) / "k.cubin")
            # -cubin takes one real architecture: drop the PTX (compute_XX) targets.
            argv = [re.sub(r"code=\[?compute_\d+a?,(sm_\d+a?)\]?", r"code=\1", a) for a in argv
                    if a != "-c"] + ["-cubin", "-Xptxas", "-v"]
            text = subprocess.run(argv, cwd=c["directory"], capture_output=True, text=True).stderr
        function = properties_of = None
        for line in text.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'", line)
            if m:
                function = m.group(1)
                result[function] = {}
            m = re.search(r"Function properties for (\w+)", line)
            if m:  # also printed for device functions it calls (libdevice's slow paths)
                properties_of = m.group(1)
            m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
            if m and function and properties_of == function:
                result[function]["spill"] = (int(m.group(1)), int(m.group(2)))
            m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem|$)", line)
            if m and function:
                result[function]["regs"] = int(m.group(1))
                result[function]["smem"] = int(m.group(2) or 0)
    names = demangle(sorted(result)) if result else {}
    return {names[k]: v for k, v in result.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", type=Path, help="a build folder configured with -DECHELON_CUDA=ON")
    ap.add_argument("--ptxas", action="store_true",
                    help="recompile each .cu with -Xptxas -v for the spill store/load bytes (slow)")
    ap.add_argument("--objects", type=Path, nargs="+",
                    help="read these objects instead of the build's CUDA library objects")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    args = ap.parse_args()

    objects = args.objects or sorted(args.build.glob("CMakeFiles/echelon_cuda.dir/**/*.cu.o"))
    if not objects:
        print(f"cuda-resources: no CUDA objects under {args.build} (a CPU-only or emulation "
              "build): skipping")
        return 77
    kernels = {}
    for obj in objects:
        for arch, cubin in fatbin_cubins(host_fatbin(obj)):
            for name, k in cubin_kernels(cubin).items():
                kernels[(name, arch)] = dict(k, source=obj.name.removesuffix(".o"), object=obj)
    if not kernels:
        raise SystemExit(f"cuda-resources: no cubin in the {len(objects)} CUDA objects")
    names = demangle(sorted({n for n, _ in kernels}))
    sites = launch_sites(args.repo)
    # ptxas' spill counts: every object with --ptxas, else those with a kernel using local memory.
    framed = objects if args.ptxas else sorted({k["object"] for k in kernels.values() if k["frame"]})
    spills = ptxas_spills(args.build, framed) if framed else {}

    rows, bad, local_arrays, mismatches = [], [], [], []
    for (name, arch), k in sorted(kernels.items(), key=lambda kv: (kv[1]["source"], names[kv[0][0]])):
        display, base = short_name(names[name])
        known = {b for b in sites.get(base, {}).values() if b}
        if len(known) == 1:
            block, how = known.pop(), "launch"
        elif len(known) > 1:
            block, how = max(known), "launch,max"
        elif k["max_threads"]:
            block, how = k["max_threads"], "bounds"
        else:
            block, how = None, "?"
        ptxas = spills.get(names[name], {})
        spill = ptxas.get("spill")
        if (spill and any(spill)) or (k["frame"] and not spill):  # unknown counts as a spill
            bad.append(display)
        elif k["frame"]:
            local_arrays.append(f"{display} ({k['frame']} B)")
        for what in ("regs", "smem"):  # the objects and ptxas must agree
            if what in ptxas and ptxas[what] != k[what]:
                mismatches.append(f"{display}: {what} {k[what]} in the object, {ptxas[what]} ptxas")
        row = [k["source"], display[:72], f"sm_{arch}", f"{block or '?'} {how}", k["regs"],
               k["frame"], "-" if not spill else f"{spill[0]}/{spill[1]}", k["smem"]]
        if block:
            blocks, warps, limiter = occupancy(block, k["regs"], k["smem"])
            row += [blocks, blocks * warps, f"{100 * blocks * warps // MAX_WARPS_SM}%", limiter]
        else:
            row += ["?", "?", "?", "block size unknown"]
        rows.append(row)

    header = ["file", "kernel", "arch", "block", "regs", "local B", "spill st/ld", "smem B",
              "blk/SM", "warps/SM", "occ", "limited by"]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print("CUDA kernel resources (sm_90 occupancy as cuda_occupancy.h; block from the launch site, "
          "bounds = __launch_bounds__; local B = stack frame bytes per thread)")
    for r in [header] + rows:
        print("  ".join(str(v).ljust(w) if i < 4 or i == 11 else str(v).rjust(w)
                        for i, (v, w) in enumerate(zip(r, widths))).rstrip())
    print(f"{len(rows)} kernels in {len(objects)} objects; spill st/ld: ptxas -v's bytes, for "
          f"{'every kernel' if args.ptxas else 'the objects whose kernels use local memory'}")
    if local_arrays:
        print("local memory without spills (a local array): " + "; ".join(local_arrays))
    if args.ptxas and len(spills) < len(rows):
        mismatches.append(f"ptxas -v reported {len(spills)} of the {len(rows)} kernels")
    for m in mismatches:
        print(f"MISMATCH: {m}")
    if bad:
        print(f"FAIL: {len(bad)} kernel(s) spill registers (or ptxas could not tell): "
              + "; ".join(bad))
        return 1
    print("ok: no kernel spills registers")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
