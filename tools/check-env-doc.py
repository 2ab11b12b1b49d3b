#!/usr/bin/env python3
"""Keeps docs/environment.md the one list of the environment variables the code reads.

Usage: check-env-doc.py SOURCE_ROOT [--self-test]

Every variable a C++ reader names (getenv("X"), env::flag/integer/choice/value("X", ...), the
emulator's env_flag/env_integer("X", ...)) in the source folders must appear in
docs/environment.md as `X`. Exit status 1 listing each missing one as FILE:LINE: X.
--self-test: a planted reader of an undocumented variable must be caught, then the real check.
"""
import os
import re
import sys

FOLDERS = ["app", "autograd", "base", "bench", "cuda", "data", "examples", "kernels", "layers",
           "parallel", "tensor", "tests", "tools"]
EXTENSIONS = (".cpp", ".cu", ".h", ".cuh")
READER = re.compile(
    r'(?:getenv|env::(?:flag|integer|value|choice(?:<[^<>()]*>)?)|env_flag|env_integer)'
    r'\(\s*"([A-Z][A-Z0-9_]*)"')


def readers(root):
    """(path:line, variable) for every reader under the source folders."""
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.join(dirpath, name)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        for variable in READER.findall(line):
                            yield f"{os.path.relpath(path, root)}:{number}", variable


def missing(sites, doc):
    return [(site, v) for site, v in sites if f"`{v}`" not in doc]


def main():
    args = sys.argv[1:]
    if not args:
        print(__doc__)
        return 2
    root = args[0]
    with open(os.path.join(root, "docs", "environment.md"), encoding="utf-8") as f:
        doc = f.read()
    sites = list(readers(root))
    if "--self-test" in args:
        planted = [("planted.cpp:1", v) for v in READER.findall(
            'env::choice<int>("ECHELON_PLANTED_SWITCH", 2, {{"2", 2}})')]
        if not planted or missing(planted, doc) != planted:
            print("self-test: the planted undocumented reader was not caught")
            return 1
    problems = missing(sites, doc)
    for site, variable in problems:
        print(f"{site}: {variable} is read but not listed in docs/environment.md")
    print(f"docs/environment.md: {len(sites)} readers checked, {len(problems)} problem(s)")
    return 1 if problems or not sites else 0


if __name__ == "__main__":
    sys.exit(main())
