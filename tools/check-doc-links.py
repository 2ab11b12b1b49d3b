#!/usr/bin/env python3
"""Keeps a guided tour of the code valid: every link resolves and names real code.

Usage: check-doc-links.py DOC.md [--min-links N] [--self-test]

For each markdown link [text](target) in DOC.md whose target is a relative path:
  * the target (relative to DOC.md's folder, without any #fragment) must exist;
  * every `code span` in the text that names a symbol must occur in the linked file: for
    `A::B::name` (with or without a trailing `()`), each of A, B and name must occur there as a
    whole word, so `Sequential::forward` fails if either `Sequential` or `forward` is renamed.
    A code span that looks like a path or a file name (`tensor/cpu/conv.cpp`) is not a symbol.
Links to http(s)/mailto and pure #anchors are ignored. Exit status 1 on any problem, listing
each as DOC:LINE: message.

--self-test: plants a renamed file and a renamed symbol into an in-memory copy of DOC.md and
checks that both are caught (the ctest doc_tour_planted runs it), then checks DOC.md itself.
"""
import os
import re
import sys

LINK = re.compile(r"\[((?:[^\[\]]|`[^`]*`)+)\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`]+)`")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def looks_like_path(span):
    return "/" in span or re.search(r"\.(cpp|h|cu|md|py|cmake|txt|json|sh)$", span) is not None


def symbol_parts(span):
    """`ops::conv2d()` -> ['ops', 'conv2d']; `Tensor<T>` -> ['Tensor']; None if not a symbol."""
    span = span.strip()
    if looks_like_path(span):
        return None
    span = re.sub(r"\(.*\)$", "", span)  # drop a call's parentheses
    span = re.sub(r"<.*>", "", span)  # drop template arguments
    parts = [p for p in span.split("::") if p]
    if not parts or not all(IDENT.fullmatch(p) for p in parts):
        return None
    return parts


def check(doc_path, text, file_cache):
    problems, links = [], 0
    base = os.path.dirname(os.path.abspath(doc_path))
    in_fence = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        for match in LINK.finditer(line):
            label, target = match.group(1), match.group(2)
            if re.match(r"^(https?:|mailto:|#)", target):
                continue
            links += 1
            path = os.path.normpath(os.path.join(base, target.split("#")[0]))
            where = f"{doc_path}:{number}"
            if not os.path.exists(path):
                problems.append(f"{where}: link target {target} does not exist")
                continue
            if os.path.isdir(path):
                continue
            if path not in file_cache:
                with open(path, encoding="utf-8", errors="replace") as f:
                    file_cache[path] = f.read()
            content = file_cache[path]
            for span in CODE.findall(label):
                parts = symbol_parts(span)
                if parts is None:
                    continue
                missing = [p for p in parts if not re.search(r"\b" + re.escape(p) + r"\b", content)]
                if missing:
                    problems.append(
                        f"{where}: `{span}`: {', '.join(missing)} not found in {target}")
    return problems, links


def self_test(doc_path, text):
    """A renamed file and a renamed symbol must both be reported."""
    first = None
    for line in text.splitlines():
        for match in LINK.finditer(line):
            spans = [s for s in CODE.findall(match.group(1)) if symbol_parts(s)]
            if spans and not re.match(r"^(https?:|#)", match.group(2)):
                first = (match.group(0), match.group(1), match.group(2), spans[-1])
                break
        if first:
            break
    if first is None:
        print("self-test: no link with a symbol to plant into")
        return False
    whole, label, target, span = first
    parts = symbol_parts(span)
    renamed_symbol = whole.replace("`" + span + "`", "`" + "::".join(parts) + "_renamed`")
    moved_file = f"[{label}]({target}.moved)"
    ok = True
    for planted, what in ((renamed_symbol, "renamed symbol"), (moved_file, "moved file")):
        problems, _ = check(doc_path, text.replace(whole, planted, 1), {})
        caught = any("_renamed" in p or ".moved" in p for p in problems)
        print(f"self-test: {what} ({planted}) {'caught' if caught else 'NOT caught'}")
        ok = ok and caught
    return ok


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    min_links = 1
    for a in argv[1:]:
        if a.startswith("--min-links="):
            min_links = int(a.split("=", 1)[1])
    if len(args) != 1:
        print(__doc__)
        return 2
    doc_path = args[0]
    with open(doc_path, encoding="utf-8") as f:
        text = f.read()
    if "--self-test" in argv and not self_test(doc_path, text):
        return 1
    problems, links = check(doc_path, text, {})
    for p in problems:
        print(p)
    if links < min_links:
        print(f"{doc_path}: only {links} links checked, expected at least {min_links}")
        return 1
    print(f"{doc_path}: {links} links checked, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
