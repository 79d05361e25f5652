#!/usr/bin/env python3
"""Lists the longest functions of C++ files, in lines from the signature to the closing brace.

Why this exists: docs/design.md asks for functions short enough to read (split past 80 lines by
what they do); this is the one command that measures it. A function is a line at column 0 that
opens a brace after a parameter list (free functions, member definitions, main, TESTs), counted
with string literals and comments set aside.

  scripts/function_lengths.py [--over N] [--top N] PATH...   (folders are searched for *.cpp)

Exit status 0; with --fail-over N, 1 when a function is longer than N lines.
"""
import argparse
import pathlib
import re
import sys

SIGNATURE = re.compile(r"^[A-Za-z_][^;]*\)\s*(const)?\s*(override)?\s*(noexcept)?\s*(:.*)?\{\s*$")
NOT_FUNCTION = re.compile(r"^(namespace|struct|class|enum|union|extern|template\s*<[^>]*>\s*$)")


def code_only(line, in_comment):
    """The line without comments and string or character literals; and whether a /* stays open."""
    out, i = [], 0
    while i < len(line):
        if in_comment:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out), True
            i, in_comment = end + 2, False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_comment, i = True, i + 2
        elif line[i] in "\"'":
            quote, i = line[i], i + 1
            while i < len(line) and line[i] != quote:
                i += 2 if line[i] == "\\" else 1
            i += 1
        else:
            out.append(line[i])
            i += 1
    return "".join(out), in_comment


def functions(path):
    lines = path.read_text(errors="replace").split("\n")
    code, in_comment = [], False
    for line in lines:
        text, in_comment = code_only(line, in_comment)
        code.append(text)
    i = 0
    while i < len(code):
        line = code[i]
        # A signature may span lines: join up to 4 lines that end at an opening brace.
        head = line
        end = i
        while not head.rstrip().endswith("{") and end < i + 4 and end + 1 < len(code):
            if ";" in head or not head[:1].strip():
                break
            end += 1
            head += " " + code[end].strip()
        if line[:1].strip() and not NOT_FUNCTION.match(line) and SIGNATURE.match(head):
            depth, j = 0, end
            for j in range(i, len(code)):
                depth += code[j].count("{") - code[j].count("}")
                if depth == 0 and j >= end:
                    break
            yield j - i + 1, i + 1, lines[i].strip()
            i = j + 1
        else:
            i += 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--top", type=int, default=15, help="how many to list (default 15)")
    parser.add_argument("--over", type=int, default=0, help="list only those longer than this")
    parser.add_argument("--fail-over", type=int, default=0, help="exit 1 past this many lines")
    args = parser.parse_args()
    found = []
    for name in args.paths:
        path = pathlib.Path(name)
        files = sorted(path.rglob("*.cpp")) if path.is_dir() else [path]
        for f in files:
            found += [(n, f"{f}:{line}", sig[:80]) for n, line, sig in functions(f)]
    found.sort(key=lambda r: -r[0])
    shown = [r for r in found if r[0] > args.over][: args.top]
    for n, where, sig in shown:
        print(f"{n:5d}  {where}  {sig}")
    print(f"{len(found)} functions; {sum(1 for r in found if r[0] > 80)} over 80 lines")
    if args.fail_over and found and found[0][0] > args.fail_over:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
