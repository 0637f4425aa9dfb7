#!/usr/bin/env python3
"""Fails when a production module reaches into another module's private sources.

A module's private headers sit in <module>/src; other modules see only <module>/include. Two ways
to bypass that are checked: a CMakeLists.txt adding another module's src/ to an include path, and a
source file including a path that climbs out of its module ("../../actors/src/x.hpp"). Tests and
benchmarks are white-box and may read a module's src/ (tests/, bench/ are not checked).
"""
import os
import re
import sys

MODULES = ["core", "nn", "gpu", "storage", "transport", "collective", "observe", "supervision",
           "cluster", "wire", "job", "model", "actors", "control", "serve", "apps"]


def main(root):
    problems = []
    src_ref = re.compile(r"\$\{(?:PROJECT_SOURCE_DIR|CMAKE_SOURCE_DIR)\}/(\w+)/src")
    include = re.compile(r'#\s*include\s+"([^"]+)"')
    for module in MODULES:
        base = os.path.abspath(os.path.join(root, module))
        for dirpath, _, files in os.walk(base):
            for name in files:
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.abspath(root))
                if name == "CMakeLists.txt" or name.endswith(".cmake"):
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        for other in src_ref.findall(line):
                            if other != module:
                                problems.append(f"{rel}:{n}: adds {other}/src to an include path")
                elif name.endswith((".cpp", ".hpp", ".cu", ".cuh")):
                    for n, line in enumerate(open(path, encoding="utf-8"), 1):
                        m = include.search(line)
                        if not m or not m.group(1).startswith(".."):
                            continue
                        target = os.path.normpath(os.path.join(dirpath, m.group(1)))
                        if not target.startswith(base + os.sep):
                            problems.append(f"{rel}:{n}: includes {m.group(1)}, outside module {module}/")
    for p in problems:
        print(p)
    print(f"{len(MODULES)} modules checked: {len(problems)} include(s) into another module's private sources")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")))
