#!/usr/bin/env python3
"""Lists function bodies in src/ longer than a limit (issue 13: "no function in src/ over
about 120 lines without a reason written above it").

    scripts/long_functions.py [--limit 120] [ROOT]

A function may be longer when the comment block right above it contains the words
"long because" with the reason (e.g. "// Long because the kernel's stages share registers").
Exit 0: none unexplained; 1: some (listed as path:line: name, N lines).

The parser is a heuristic for this code base's style: a definition is a line ending in "{"
whose text (with the lines before it up to the previous ";", "}" or blank line) holds a
parameter list, at namespace or class level (not inside another function). Braces in
strings, character literals and comments are ignored.
"""
import argparse
import os
import re
import sys

KEYWORDS = ("if", "for", "while", "switch", "catch", "do", "else", "namespace", "class",
            "struct", "enum", "union", "extern")


def strip(line, in_block):
    """The line without comments and string/char literals; whether a /* */ stays open."""
    out, i = [], 0
    while i < len(line):
        if in_block:
            j = line.find("*/", i)
            if j < 0:
                return "".join(out), True
            i, in_block = j + 2, False
        elif line.startswith("//", i):
            break
        elif line.startswith("/*", i):
            in_block, i = True, i + 2
        elif line[i] in "\"'":
            q, i = line[i], i + 1
            while i < len(line) and line[i] != q:
                i += 2 if line[i] == "\\" else 1
            i += 1
            out.append(q + q)
        else:
            out.append(line[i])
            i += 1
    return "".join(out), in_block


def functions(path):
    """Yields (start line, name, length, comment above) of every function body."""
    lines = open(path, encoding="utf-8", errors="replace").read().split("\n")
    code, in_block = [], False
    for ln in lines:
        c, in_block = strip(ln, in_block)
        code.append(c)
    depth_stack = []  # kinds of open braces: "scope" (namespace/class) or "func" or "block"
    func_start = None
    for i, c in enumerate(code):
        for ch in c:
            if ch == "{":
                inside_func = "func" in depth_stack
                kind = "block"
                if not inside_func:
                    # The declaration text: this line back to the previous ; { } or blank.
                    head, k = [c[:c.index("{")] if "{" in c else c], i - 1
                    while k >= 0 and code[k].strip() and not re.search(r"[;{}]\s*$", code[k]) \
                            and len(head) < 12:
                        head.insert(0, code[k])
                        k -= 1
                    text = " ".join(h.strip() for h in head)
                    first = re.match(r"\s*(\w+)", text)
                    if "(" in text and not (first and first.group(1) in KEYWORDS) \
                            and not re.search(r"\b(namespace|class|struct|enum)\b[^(]*$", text) \
                            and not text.rstrip().endswith("="):
                        kind = "func"
                        name = [n for n in re.findall(r"([~\w:<>]+)\s*\(", text)
                                if not n.startswith("__")]
                        func_start = (k + 2, name[0] if name else "?", text)
                    else:
                        kind = "scope"
                depth_stack.append(kind)
            elif ch == "}" and depth_stack:
                kind = depth_stack.pop()
                if kind == "func" and "func" not in depth_stack and func_start:
                    start, name, _ = func_start
                    above, k = [], start - 2
                    while k >= 0 and lines[k].strip().startswith(("//", "*", "/*", "template")):
                        above.insert(0, lines[k])
                        k -= 1
                    yield start, name, i + 1 - start + 1, "\n".join(above)
                    func_start = None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=120)
    ap.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), "..", "src"))
    a = ap.parse_args()
    bad = 0
    for d, _, files in sorted(os.walk(a.root)):
        if "/emu" in d:
            continue  # the CUDA emulator's runtime mirrors the CUDA API, not project style
        for f in sorted(files):
            if not f.endswith((".cc", ".cu", ".h")):
                continue
            p = os.path.join(d, f)
            for start, name, n, above in functions(p):
                if n > a.limit and "long because" not in above.lower():
                    print(f"{os.path.relpath(p, os.path.join(a.root, '..'))}:{start}: {name}, {n} lines")
                    bad += 1
    if bad:
        print(f"{bad} function(s) over {a.limit} lines without a 'long because' reason above them",
              file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
