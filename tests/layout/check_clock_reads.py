#!/usr/bin/env python3
"""Fails when production code of the checked modules names a std::chrono clock.

Every deadline, timeout and timestamp of those modules reads the injected troupe::clock
(core/clock.hpp), so that their unit tests can run on a manual clock (docs/architecture.md, "One
clock"). Naming steady_clock, system_clock or high_resolution_clock is how code reads time behind
the clock's back: directly (steady_clock::now()) or through an alias (`using steady =
std::chrono::steady_clock;`), whose definition names it too. Comments are not code and are skipped.
The seam itself (SEAM) is where the real clocks are read. The files in ALLOWED still read one,
each for the reason given; a file leaves the list when it takes the clock.
"""
import os
import re
import sys

# Every module: each top-level folder with a CMakeLists.txt but the tests, benchmarks and examples
# (a new module is checked from its first file), which CHECKED_AT_LEAST must be among.
NOT_PRODUCTION = {"tests", "bench", "examples", "build", "cmake", "scripts", "docs"}
CHECKED_AT_LEAST = {"core", "nn", "gpu", "storage", "transport", "collective", "observe", "supervision", "cluster",
                    "wire", "job", "model", "actors", "control", "serve", "torchscript", "apps"}


def modules(root):
    return sorted(d for d in os.listdir(root)
                  if d not in NOT_PRODUCTION and not d.startswith(".")
                  and os.path.isfile(os.path.join(root, d, "CMakeLists.txt")))


CLOCKS = re.compile(r"\b(steady_clock|system_clock|high_resolution_clock)\b")

# troupe::clock's system clock and its time_point type: the one place that names the real clocks.
SEAM = {"core/src/clock.cpp", "core/include/troupe/core/clock.hpp"}

ALLOWED = {
}

COMMENT = re.compile(r"//.*$")


def main(root):
    problems = []
    seen = set()
    checked = modules(root)
    missing = CHECKED_AT_LEAST - set(checked)
    if missing:
        print(f"modules not found under {root}: {', '.join(sorted(missing))}", file=sys.stderr)
        return 1
    for module in checked:
        for dirpath, _, files in os.walk(os.path.join(root, module)):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                if rel in SEAM:
                    continue
                in_block = False
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    # Block comments: skipped whole lines only (the tree writes // comments).
                    if in_block:
                        in_block = "*/" not in line
                        continue
                    if line.lstrip().startswith("/*"):
                        in_block = "*/" not in line
                        continue
                    found = CLOCKS.search(COMMENT.sub("", line))
                    if not found:
                        continue
                    seen.add(rel)
                    if rel not in ALLOWED:
                        problems.append(f"{rel}:{n}: reads std::chrono::{found.group(1)}; take a troupe::clock& "
                                        "(core/clock.hpp) instead")
    for rel in sorted(set(ALLOWED) - seen):
        print(f"note: {rel} no longer names a std::chrono clock: remove it from ALLOWED", file=sys.stderr)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} direct read(s) of a std::chrono clock outside the clock (docs/architecture.md)",
              file=sys.stderr)
        return 1
    print(f"no direct std::chrono clock reads in {', '.join(checked)} outside the seam and {len(ALLOWED)} "
          "listed files")
    return 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")))
