#!/usr/bin/env python3
"""The instruction mix of each CUDA kernel's main loops, read from its SASS (issue #10).

    tools/sass-loops.py [--filter REGEX] [--loops] [--cuobjdump PATH] FILE...

FILE: an object file or library holding sm_90 cubins (cuobjdump -sass reads it), or a text file
of cuobjdump's -sass output (a name ending in .sass). Without a GPU this is the one look at what
the hot loops cost: a loop's static instruction count bounds what it can issue, one warp
instruction per cycle per scheduler, so a loop whose math (FFMA, HMMA) is a small share of its
instructions cannot reach the math units' rate whatever the memory does. It also shows code that
should not be there: generic loads (LD) of shared tiles, which need 64-bit addresses and take the
slower generic path where LDS would do; calls (CALL: 64-bit division, a trap switch); branches.

A loop is the range from a backward branch's target to the branch. Per kernel, the "slice loops"
are the outermost loops that hold math and a barrier (BAR): one k-slice of a GEMM block tile, one
copy per staging the kernel is specialized for. The table gives, over those copies, the static
instructions (median and range), and per copy (median): math, shared loads (LDS/LDSM), generic
loads (LD), global loads (LDG), cp.async (LDGSTS), shared stores (STS), integer and address
arithmetic, branches and calls. Inner loops (a multiply's k-steps) are counted once, as written;
--loops lists every loop, nested ones indented. Static counts, not a profile: both arms of a branch
count, and so does code a launch never reaches.
"""
import argparse
import collections
import os
import re
import shutil
import statistics
import subprocess
import sys

INSTRUCTION = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(@!?U?P[T0-9]\s+)?([A-Z][A-Z0-9_]*)([.A-Z0-9_]*)\s*([^;]*);")
FUNCTION = re.compile(r"Function : (\S+)")
TARGET = re.compile(r"0x([0-9a-f]+)")

CLASSES = [  # (column, opcodes)
    ("math", {"FFMA", "HMMA", "HFMA2", "IMMA", "DMMA", "HGMMA"}),
    ("LDS", {"LDS", "LDSM"}),
    ("LD", {"LD"}),
    ("LDG", {"LDG"}),
    ("LDGSTS", {"LDGSTS"}),
    ("STS", {"STS"}),
    ("int", {"IMAD", "IADD3", "IADD", "VIADD", "LEA", "SHF", "LOP3", "ISETP", "SEL", "MOV", "PLOP3",
             "UIADD3", "UIMAD", "ULEA", "USHF", "ULOP3", "UMOV", "UISETP", "USEL", "IABS", "I2F",
             "F2I", "MUFU", "FSETP", "FSEL", "S2R", "S2UR", "LDC", "ULDC", "PRMT", "UPRMT", "R2UR",
             "IMNMX", "VIMNMX"}),
    ("branch", {"BRA", "BSSY", "BSYNC", "WARPSYNC", "BREAK", "EXIT"}),
    ("call", {"CALL", "RET", "BPT"}),
]


def demangled(names):
    tool = shutil.which("c++filt")
    if not tool:
        return {n: n for n in names}
    out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True).stdout
    return dict(zip(names, out.splitlines()))


def short_name(name):
    """The kernel and its template arguments: no return type, namespaces or parameter list."""
    depth = 0
    for i, ch in enumerate(name):
        depth += {"<": 1, ">": -1}.get(ch, 0)
        if ch == "(" and depth == 0 and i > 0 and not name[:i].endswith("anonymous namespace"):
            if not name[i:].startswith("(anonymous"):
                name = name[:i]
                break
    name = re.sub(r"^void ", "", name).replace("(anonymous namespace)::", "")
    name = re.sub(r"\b(echelon|cuda|tile)::", "", name)
    return name.replace("__nv_bfloat16", "bf16").replace(" ", "")


def sass_text(path, cuobjdump):
    if path.endswith(".sass"):
        with open(path, encoding="utf-8") as f:
            return f.read()
    try:
        result = subprocess.run([cuobjdump, "-sass", path], capture_output=True, text=True)
    except FileNotFoundError:
        sys.exit(f"sass-loops: no cuobjdump at {cuobjdump} (the CUDA toolkit's cuobjdump package; "
                 "name another with --cuobjdump or CUOBJDUMP, or pass a .sass text file)")
    if result.returncode != 0:
        sys.exit(f"sass-loops: {cuobjdump} -sass {path} failed: {result.stderr.strip()}")
    return result.stdout


def functions(text):
    """(mangled name, [(address, opcode, operands)]) per function."""
    name, body = None, []
    for line in text.splitlines():
        found = FUNCTION.search(line)
        if found:
            if name:
                yield name, body
            name, body = found.group(1), []
            continue
        ins = INSTRUCTION.search(line)
        if ins and name:
            body.append((int(ins.group(1), 16), ins.group(3), ins.group(5)))
    if name:
        yield name, body


def loops(body):
    """(first, last) instruction indices of each backward branch's range, outermost first."""
    index = {address: i for i, (address, _, _) in enumerate(body)}
    found = []
    for i, (address, opcode, operands) in enumerate(body):
        if opcode == "BRA":
            target = TARGET.search(operands)
            if target and int(target.group(1), 16) <= address and int(target.group(1), 16) in index:
                found.append((index[int(target.group(1), 16)], i))
    return sorted(set(found), key=lambda r: (r[0], -r[1]))


def mix(body, first, last):
    counts = collections.Counter(opcode for _, opcode, _ in body[first:last + 1])
    row = {column: sum(counts[o] for o in opcodes) for column, opcodes in CLASSES}
    row["length"] = last - first + 1
    row["BAR"] = counts["BAR"]
    return row


def slice_loops(body):
    """The outermost loops holding math and a barrier."""
    chosen = []
    for first, last in loops(body):
        row = mix(body, first, last)
        if row["math"] == 0 or row["BAR"] == 0:
            continue
        if any(f <= first and last <= l for f, l in chosen):
            continue
        chosen.append((first, last))
    return chosen


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--filter", default="", help="only kernels whose demangled name matches")
    parser.add_argument("--loops", action="store_true", help="list every loop of each kernel")
    parser.add_argument("--cuobjdump", default=os.environ.get("CUOBJDUMP") or shutil.which(
        "cuobjdump") or "/usr/local/cuda/bin/cuobjdump")
    args = parser.parse_args()
    kernels = []
    for path in args.files:
        kernels += list(functions(sass_text(path, args.cuobjdump)))
    names = demangled([name for name, _ in kernels])
    columns = ["math", "LDS", "LD", "LDG", "LDGSTS", "STS", "int", "branch", "call"]
    print(f"{'kernel':<90} {'copies':>6} {'length':>13} " + " ".join(f"{c:>6}" for c in columns))
    shown = 0
    for mangled, body in kernels:
        name = short_name(names.get(mangled, mangled))
        if not re.search(args.filter, name):
            continue
        chosen = slice_loops(body)
        if not chosen:
            continue
        shown += 1
        rows = [mix(body, first, last) for first, last in chosen]
        lengths = [r["length"] for r in rows]
        span = f"{statistics.median(lengths):.0f} {min(lengths)}-{max(lengths)}"
        print(f"{name[:90]:<90} {len(rows):>6} {span:>13} " +
              " ".join(f"{statistics.median(r[c] for r in rows):>6.0f}" for c in columns))
        if args.loops:
            outer = []
            for first, last in loops(body):
                row = mix(body, first, last)
                outer = [(f, l) for f, l in outer if f <= first and last <= l]
                print(f"    {'  ' * len(outer)}{body[first][0]:#07x}-{body[last][0]:#07x} "
                      f"length {row['length']}: " +
                      " ".join(f"{c} {row[c]}" for c in columns + ['BAR'] if row[c]))
                outer.append((first, last))
    if shown == 0:
        sys.exit("sass-loops: no kernel with a slice loop (math and a barrier in one loop) matched")


if __name__ == "__main__":
    main()
