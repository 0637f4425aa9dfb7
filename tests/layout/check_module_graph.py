#!/usr/bin/env python3
"""Fails when docs/architecture.md's module table and the CMake files disagree on who links whom.

For each module, the troupe modules its CMakeLists.txt links (troupe_add_module's DEPS and
PRIVATE_DEPS, target_link_libraries of its target), `core` left out, must be exactly those the
table's "links" column names (a parenthesis there is a remark: third-party libraries, headers).
"""
import os
import re
import sys

MODULES = ["core", "nn", "gpu", "storage", "transport", "collective", "observe", "supervision",
           "cluster", "wire", "job", "model", "actors", "control", "serve", "torchscript", "apps"]


def target_of(module):
    return "troupe" if module == "apps" else "troupe_" + module


def cmake_links(root, module):
    text = open(os.path.join(root, module, "CMakeLists.txt"), encoding="utf-8").read()
    text = re.sub(r"#[^\n]*", "", text)
    links = set()
    for call, args in re.findall(r"\b(troupe_add_module|target_link_libraries)\s*\(([^)]*)\)", text):
        words = args.split()
        if not words:
            continue
        target = "troupe_" + words[0] if call == "troupe_add_module" else words[0]
        if target != target_of(module):
            continue
        for w in words[1:]:
            m = re.fullmatch(r"troupe_(\w+)", w)
            if m and m.group(1) in MODULES and m.group(1) not in ("core", module):
                links.add(m.group(1))
    return links


def documented_links(root):
    rows = {}
    row = re.compile(r"^\|\s*`(\w+)/`\s*\|\s*`[^`]+`\s*\|.*\|\s*([^|]*)\|\s*$")
    for line in open(os.path.join(root, "docs", "architecture.md"), encoding="utf-8"):
        m = row.match(line)
        if not m:
            continue
        names = re.sub(r"\([^)]*\)", "", m.group(2))
        rows[m.group(1)] = {n.strip() for n in names.split(",") if n.strip() and n.strip() != "—"}
    return rows


def main(root):
    documented = documented_links(root)
    problems = []
    for module in MODULES:
        built = cmake_links(root, module)
        if module not in documented:
            problems.append(f"docs/architecture.md: no row for {module}/ (links {sorted(built)})")
            continue
        if built != documented[module]:
            problems.append(f"{module}/: CMakeLists.txt links {sorted(built)}, "
                            f"docs/architecture.md says {sorted(documented[module])}")
    for p in problems:
        print(p)
    print(f"{len(MODULES)} modules checked: {len(problems)} disagreement(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
