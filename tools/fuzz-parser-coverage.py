#!/usr/bin/python3
"""Line coverage of the parser functions of one fuzz target (tools/fuzz.sh --coverage).

    tools/fuzz-parser-coverage.py BINARY PROFDATA TARGET [--list tests/fuzz/parsers.txt] [-v]

"The parser" of a target is a list of functions in tests/fuzz/parsers.txt (one line per target
and source file: `TARGET FILE FUNCTION...`). A function is named by its qualified name without
namespaces that the file shares, e.g. `idx_header` or `TrainOptions::from_json`; it matches every
function llvm-cov knows in that file whose demangled name (with "(anonymous namespace)::"
removed and the parameter list cut off) ends in "::NAME" or is NAME, so lambdas inside a listed
function belong to it. The parser's lines are the union of the line spans of the matched
functions; each line's execution count comes from `llvm-cov show` (lines without a count are not
code). A name that matches nothing is an error, so the list cannot silently drift from the code.

Prints one line: TARGET LINES COVERED PERCENT, then per file "FILE covered/lines"; with -v also
each function's coverage and every missed line.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def read_list(path, target):
    wanted = {}  # file -> [names]
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].split()
            if len(line) >= 3 and line[0] == target:
                wanted.setdefault(line[1], []).extend(line[2:])
    if not wanted:
        sys.exit(f"fuzz-parser-coverage: no functions listed for target {target} in {path}")
    return wanted


def demangle(names):
    out = subprocess.run(["llvm-cxxfilt-14"], input="\n".join(names), capture_output=True,
                         text=True, check=True).stdout.splitlines()
    return dict(zip(names, out))


def base_name(demangled):
    # "echelon::data::(anonymous namespace)::idx_header(std::...)" -> "echelon::data::idx_header";
    # a lambda "f(args)::$_3::operator()(...)" -> "f" (its enclosing function).
    name = demangled.replace("(anonymous namespace)::", "").replace("[abi:cxx11]", "")
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and not name.startswith("operator", max(0, i - 8)):
            cut = i
            break
    # Drop a return type ("std::string echelon::x") and template arguments of the function.
    head = name[:cut]
    head = re.sub(r"<[^<>]*>$", "", head)
    return head.split(" ")[-1]


def line_counts(binary, profdata):
    """{normalised source path: {line: executed?}} for every instrumented file (lines without a
    count are not code)."""
    text = subprocess.run(
        ["llvm-cov-14", "show", binary, "-instr-profile=" + profdata, "-show-expansions=false",
         "-show-instantiations=false", "-format=text"],
        capture_output=True, text=True, check=True).stdout
    counts, current = {}, None
    for row in text.splitlines():
        if row.startswith("/") and row.endswith(":"):
            current = counts.setdefault(os.path.realpath(row[:-1]), {})
            continue
        m = re.match(r"^\s*(\d+)\|\s*([0-9.]+[kMGE]?)?\|", row)
        if m and current is not None and m.group(2) is not None:
            current[int(m.group(1))] = m.group(2) != "0"
    return counts


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("profdata")
    ap.add_argument("target")
    ap.add_argument("--list", default=os.path.join(ROOT, "tests", "fuzz", "parsers.txt"))
    ap.add_argument("-v", action="store_true")
    args = ap.parse_args()
    # Ninja compiles from the build folder, and ccache (CCACHE_BASEDIR) makes paths relative to it.
    build_dir = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(args.binary))))
    wanted = read_list(args.list, args.target)

    export = json.loads(subprocess.run(
        ["llvm-cov-14", "export", args.binary, "-instr-profile=" + args.profdata,
         "-skip-expansions", "-format=text", "-summary-only=false"],
        capture_output=True, text=True, check=True).stdout)
    functions = export["data"][0]["functions"]
    all_counts = line_counts(args.binary, args.profdata)
    names = demangle([f["name"] for f in functions])

    total = covered = 0
    per_file, details, problems = [], [], []
    for source, listed in wanted.items():
        path = os.path.realpath(os.path.join(ROOT, source))
        spans = {}  # listed name -> set of lines
        raw_name = None
        for f in functions:
            # realpath: headers are reached through the build folder's include/ symlinks.
            files = [os.path.realpath(os.path.join(build_dir, x)) for x in f["filenames"]]
            if path not in files:
                continue
            file_id = files.index(path)
            raw_name = f["filenames"][file_id]
            name = base_name(names[f["name"]])
            for item in listed:
                if item.endswith("::*"):
                    hit = ("::" + name).find("::" + item[:-1]) >= 0
                else:
                    hit = name == item or name.endswith("::" + item)
                if hit:
                    lines = spans.setdefault(item, set())
                    for r in f["regions"]:
                        if r[5] == file_id and r[7] == 0:  # code region in this file
                            lines.update(range(r[0], r[2] + 1))
        for item in listed:
            if item not in spans:
                problems.append(f"{source}: no function '{item}' (renamed? fix tests/fuzz/parsers.txt)")
        if raw_name is None:
            problems.append(f"{source}: not in the coverage build")
            continue
        counts = all_counts.get(path, {})
        all_lines = set().union(*spans.values()) if spans else set()
        code = sorted(l for l in all_lines if l in counts)
        hit = [l for l in code if counts[l]]
        total += len(code)
        covered += len(hit)
        per_file.append(f"{source} {len(hit)}/{len(code)}")
        if args.v:
            for item, lines in spans.items():
                c = [l for l in lines if l in counts]
                h = [l for l in c if counts[l]]
                details.append(f"  {source} {item}: {len(h)}/{len(c)}")
            missed = [l for l in code if not counts[l]]
            if missed:
                details.append(f"  {source} missed lines: {','.join(map(str, missed))}")
    if problems:
        sys.exit("fuzz-parser-coverage: " + "; ".join(problems))
    pct = 100.0 * covered / total if total else 0.0
    print(f"{args.target} {total} {covered} {pct:.1f}% {' '.join(per_file)}")
    for d in details:
        print(d)


if __name__ == "__main__":
    main()
