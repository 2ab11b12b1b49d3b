#!/usr/bin/env python3
"""Prints Nsight Compute's counters of bench/exp_gpu_profile's subjects as one table (issue #10).

    tools/ncu-table.py SUBJECTS RAW_CSV

SUBJECTS: the driver's --subjects-out file (one subject a line, in launch order). RAW_CSV:
`ncu --import REPORT --csv --page raw --print-units base` of the run (the details page's layout,
a row per metric, is read too). The driver launches a
marker kernel before each subject and one after the last, and the first profiled kernel is a
marker, so runs of that kernel's name split the rows into the subjects' kernels.

One line per kernel: time, grid and block, registers, shared memory, waves, SM / DRAM / issue /
tensor-pipe utilisation, achieved occupancy, shared-memory wavefronts per request (1.0 = no bank
conflict), global load bytes used per 32-byte sector (32 = coalesced), and the two largest warp
stall reasons (cycles per issued instruction). A metric ncu did not collect prints '-'.
A training step's subject ("step ...", many kernels) is followed by its kernels summed by name,
largest first: calls, total time and share of the step's kernel time.
Exit status 1 when the markers do not split the rows into as many parts as there are subjects
(the table is printed anyway, parts numbered instead of named).
"""
import csv
import re
import sys

TIME = "gpu__time_duration.sum"  # nanoseconds once read
STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
STALL_REASONS = ["long_scoreboard", "short_scoreboard", "barrier", "mio_throttle",
                 "math_pipe_throttle", "wait", "not_selected", "lg_throttle", "no_instruction",
                 "dispatch_stall", "membar", "branch_resolving", "imc_miss", "tex_throttle"]
SHARED_CONFLICTS = "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{}.sum"  # ld / st
SHARED_WAVEFRONTS = "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{}.sum"

# The columns: header, metric, format (None: computed below).
COLUMNS = [
    ("us", TIME, lambda v: f"{v / 1e3:.1f}"),
    ("regs", "launch__registers_per_thread", lambda v: f"{v:.0f}"),
    ("waves", "launch__waves_per_multiprocessor", lambda v: f"{v:.2f}"),
    ("SM%", "sm__throughput.avg.pct_of_peak_sustained_elapsed", lambda v: f"{v:.0f}"),
    ("DRAM%", "dram__throughput.avg.pct_of_peak_sustained_elapsed", lambda v: f"{v:.0f}"),
    ("issue%", "smsp__issue_active.avg.pct_of_peak_sustained_active", lambda v: f"{v:.0f}"),
    ("TC%", "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
     lambda v: f"{v:.0f}"),
    ("occ%", "sm__warps_active.avg.pct_of_peak_sustained_active", lambda v: f"{v:.0f}"),
    ("B/sec", "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.ratio",
     lambda v: f"{v:.1f}"),
]


def number(text):
    """A metric's value as a float, or None (ncu may group digits with commas)."""
    text = (text or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


TO_NS = {"nsecond": 1, "ns": 1, "usecond": 1e3, "us": 1e3, "msecond": 1e6, "ms": 1e6,
         "second": 1e9, "s": 1e9}


def in_ns(value, unit):
    """A duration as nanoseconds (the raw page's units row, or a details row's Metric Unit)."""
    v = number(value)
    return None if v is None else str(v * TO_NS.get((unit or "nsecond").strip(), 1))


def read_rows(path):
    """The kernel rows of an ncu CSV, in launch (ID) order, each a dict by column or metric name.

    Two layouts: the raw page (`--page raw`: a column per metric, a units row under the header)
    and the details page (`--page details`, also what `ncu --csv --metrics ...` prints: a row per
    metric with "Metric Name", "Metric Unit" and "Metric Value"), pivoted here to one row per ID.
    """
    with open(path, newline="") as f:
        lines = [line for line in f if not line.startswith("==")]  # ncu's own messages
    header, units, by_id = None, {}, {}
    for fields in csv.reader(lines):
        if header is None:
            if "Kernel Name" in fields and "ID" in fields:
                header = fields
            continue
        row = dict(zip(header, fields))
        if number(row.get("ID")) is None:  # the raw page's units row
            units = row
            continue
        kernel = by_id.setdefault(row["ID"], dict(row))
        if "Metric Name" in row:  # details layout
            value = row.get("Metric Value", "")
            if row["Metric Name"] == TIME:
                value = in_ns(value, row.get("Metric Unit"))
            kernel[row["Metric Name"]] = value
    if header is None:
        sys.exit(f"ncu-table: {path}: no header with 'ID' and 'Kernel Name': not an ncu CSV")
    rows = sorted(by_id.values(), key=lambda r: number(r["ID"]))
    if TIME in header:  # raw layout: scale by its units row
        for row in rows:
            row[TIME] = in_ns(row.get(TIME), units.get(TIME))
    return rows


def short_name(kernel):
    """'void ns::(anonymous namespace)::k<float, 2>(Args)' -> 'k<float, 2>' (at most 48 chars)."""
    name = kernel.strip()
    if name.startswith("void "):
        name = name[5:]
    depth, cut = 0, len(name)  # drop the parameter list: the last top-level '(...)'
    for i, c in enumerate(name):
        if c in "<(":
            if c == "(" and depth == 0 and i > 0:
                cut = i
            depth += 1
        elif c in ">)":
            depth -= 1
    name = name[:cut]
    depth, start = 0, 0  # drop namespaces: the last top-level '::'
    for i in range(len(name)):
        if name[i] == "<":
            depth += 1
        elif name[i] == ">":
            depth -= 1
        elif depth == 0 and name.startswith("::", i):
            start = i + 2
    name = name[start:]
    return name if len(name) <= 48 else name[:45] + "..."


def shared_ways(row, op):
    """Shared-memory wavefronts per request of `op` (ld / st): 1.0 without bank conflicts."""
    wavefronts = number(row.get(SHARED_WAVEFRONTS.format(op)))
    conflicts = number(row.get(SHARED_CONFLICTS.format(op)))
    if wavefronts is None or conflicts is None:
        return "-"
    if wavefronts == 0:
        return "0"
    ideal = wavefronts - conflicts
    return f"{wavefronts / ideal:.1f}" if ideal > 0 else "-"


def top_stalls(row):
    stalls = [(number(row.get(STALL.format(r))), r) for r in STALL_REASONS]
    stalls = sorted(((v, r) for v, r in stalls if v is not None), reverse=True)[:2]
    return ", ".join(f"{r} {v:.1f}" for v, r in stalls) or "-"


def kernel_line(row):
    """The cells of HEADERS for one kernel row."""
    cells = [short_name(row.get("Kernel Name", "")),
             re.sub(r"\s", "", row.get("Grid Size", "-")),
             re.sub(r"\s", "", row.get("Block Size", "-"))]
    for _, metric, fmt in COLUMNS:
        value = number(row.get(metric))
        cells.append("-" if value is None else fmt(value))
    smem = [number(row.get(f"launch__shared_mem_per_block_{k}")) for k in ("static", "dynamic")]
    cells.append("-" if None in smem else f"{sum(smem) / 1024:.0f}K")
    return cells + [shared_ways(row, "ld"), shared_ways(row, "st"), top_stalls(row)]


HEADERS = (["kernel", "grid", "block"] + [h for h, _, _ in COLUMNS] +
           ["smem", "shm ld", "shm st", "top stalls (cycles/issue)"])


def by_name(part, total_us):
    """Lines of a step's kernels summed by short name, largest first (at most 15)."""
    sums = {}
    for row in part:
        name = short_name(row.get("Kernel Name", ""))
        calls, us = sums.get(name, (0, 0.0))
        sums[name] = (calls + 1, us + (number(row.get(TIME)) or 0) / 1e3)
    ranked = sorted(sums.items(), key=lambda item: -item[1][1])
    width = max(len(name) for name, _ in ranked)
    lines = [f"  by kernel ({len(ranked)} names): calls, us, share of {total_us:.1f} us"]
    for name, (calls, us) in ranked[:15]:
        share = 100 * us / total_us if total_us > 0 else 0
        lines.append(f"    {name.ljust(width)}  x{calls:<3d} {us:9.1f}  {share:5.1f}%")
    if len(ranked) > 15:
        rest = sum(us for _, (_, us) in ranked[15:])
        lines.append(f"    ({len(ranked) - 15} more names: {rest:.1f} us)")
    return lines


def split_by_marker(rows):
    """The rows between consecutive marker rows (the first row's kernel), in order."""
    parts, current = [], None
    for row in rows:
        if row["Kernel Name"] == rows[0]["Kernel Name"]:
            if current is not None:
                parts.append(current)
            current = []
        else:
            current.append(row)
    return parts


def main(argv):
    if len(argv) != 3:
        sys.exit(__doc__)
    with open(argv[1]) as f:
        subjects = [line.rstrip("\n") for line in f if line.strip()]
    rows = read_rows(argv[2])
    parts = split_by_marker(rows)
    matched = len(parts) == len(subjects)
    table = []
    for i, part in enumerate(parts):
        title = subjects[i] if matched else f"part {i + 1}"
        total = sum(number(r.get(TIME)) or 0 for r in part) / 1e3
        table.append((f"{title}: {len(part)} kernel(s), {total:.1f} us", None))
        for row in part:
            table.append((None, kernel_line(row)))
        if title.startswith("step ") and part:
            table.extend((line, None) for line in by_name(part, total))
    widths = [max([len(h)] + [len(c[i]) for _, c in table if c]) for i, h in enumerate(HEADERS)]
    print("  " + "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths)).rstrip())
    for title, cells in table:
        if title:
            print(title)
        else:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip())
    if not matched:
        print(f"ncu-table: {len(subjects)} subject(s) in {argv[1]} but the markers split "
              f"{len(rows)} kernel row(s) into {len(parts)} part(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
