#!/usr/bin/env python3
"""Lists production C++ files over --file-lines lines and functions over --function-lines lines.

Production means every tracked *.cpp/*.hpp/*.h/*.cu/*.cuh outside tests/ and bench/ (and examples/).
Functions are found by a rough brace matcher: a `{` that follows a `)` (possibly with qualifiers,
a trailing return type or a constructor's initialiser list in between) opens a function body,
unless the text before it starts with a control keyword or a lambda introducer in the same
statement. Lambdas inside a function count as part of it. Good enough to find what asks to be
split (STYLE.md: ~400 lines a file, ~40 a function); not a parser.

  scripts/check_size.py                 report, exit 0
  scripts/check_size.py --strict        exit 1 when anything is over
  scripts/check_size.py PATH...         only files under these paths
"""
import argparse
import re
import subprocess
import sys

EXTS = (".cpp", ".hpp", ".h", ".cu", ".cuh")
EXCLUDE = ("tests/", "bench/", "examples/")
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|return)\b")


def digit_separator(text, i):
    """Whether the quote at i sits inside a number: between two (hex) digits, in a token that starts
    with a digit (u8'x' and L'x' are character literals)."""
    hexdigits = "0123456789abcdefABCDEF"
    if not (0 < i < len(text) - 1 and text[i - 1] in hexdigits and text[i + 1] in hexdigits):
        return False
    j = i
    while j > 0 and (text[j - 1].isalnum() or text[j - 1] in "_'"):
        j -= 1
    return text[j].isdigit()


def strip(text):
    """Blanks comments, string and char literals, keeping newlines so line numbers hold."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + (m.group(1) if m else "") + '"', i)
            j = n if end < 0 else end + len(m.group(1) if m else "") + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif c == "'" and digit_separator(text, i):
            out.append(c); i += 1  # a digit separator (20'000, 0xFFFF'FFFF), not a character literal
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i)); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)


def functions(code):
    """Yields (name, first_line, line_count) for each outermost function body."""
    depth = 0
    init_braces = set()  # depths of `member_{value}` braces in a constructor's initialiser list
    starts = {}  # depth -> (name, line) of a function body opened at that depth
    line = 1
    stmt_start = 0
    for i, c in enumerate(code):
        if c == "\n":
            line += 1
        elif c in ";}":
            if c == "}":
                depth -= 1
                if depth in init_braces:
                    init_braces.discard(depth)
                    continue
                if depth in starts:
                    name, first = starts.pop(depth)
                    yield name, first, line - first + 1
            stmt_start = i + 1
        elif c == "{":
            # Preprocessor lines are no part of a head: `#if defined(X)` before `namespace n {`
            # would read as a parameter list.
            head = "\n".join(l for l in code[stmt_start:i].split("\n") if not l.lstrip().startswith("#"))
            inside_function = any(d < depth for d in starts)
            if not inside_function and is_function_head(head) and re.search(r"\)[^()]*:[^:].*\w\s*$", " ".join(head.split())):
                init_braces.add(depth)
                depth += 1
                continue
            if not inside_function and is_function_head(head):
                m = re.search(r"([~\w:<>]+)\s*\([^()]*(?:\([^()]*\)[^()]*)*\)[^()]*$", head)
                name = m.group(1) if m else head.strip().split("\n")[-1][:40]
                starts[depth] = (name, line)
            depth += 1
            stmt_start = i + 1


def is_function_head(head):
    h = " ".join(head.split())
    if ")" not in h or "=" in h.split("(")[0]:
        return False
    if CONTROL.match(h) or h.startswith("[") or re.search(r"\]\s*\(", h):
        return False
    # `class x : y {`, `namespace`, `enum`, `struct`: no parameter list before the brace.
    if re.match(r"^(template\s*<.*>\s*)?(class|struct|union|enum|namespace)\b", h):
        return False
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("paths", nargs="*")
    ap.add_argument("--function-lines", type=int, default=40)
    ap.add_argument("--file-lines", type=int, default=400)
    ap.add_argument("--strict", action="store_true")
    a = ap.parse_args()
    files = subprocess.run(["git", "ls-files", *a.paths], capture_output=True, text=True, check=True).stdout.split()
    over = 0
    for f in sorted(files):
        if not f.endswith(EXTS) or f.startswith(EXCLUDE):
            continue
        try:
            text = open(f, encoding="utf-8", errors="replace").read()
        except FileNotFoundError:
            continue
        lines = text.count("\n")
        if lines > a.file_lines:
            print(f"file {f}: {lines} lines (> {a.file_lines})")
            over += 1
        for name, first, count in functions(strip(text)):
            if count > a.function_lines:
                print(f"function {f}:{first} {name}: {count} lines (> {a.function_lines})")
                over += 1
    print(f"check_size: {over} over the limits", file=sys.stderr)
    return 1 if a.strict and over else 0


if __name__ == "__main__":
    sys.exit(main())
