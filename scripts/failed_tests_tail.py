#!/usr/bin/env python3
"""Prints, for each test the last ctest run failed, the lines of its output that say why (gtest's
failures, Python's tracebacks, error lines, each with the lines after it) and its last lines.

scripts/test.sh calls it after a failed ctest run so that the end of a long log (all a CI service
may show) names the reason, not only the test: `failed_tests_tail.py BUILD_DIR`.
"""
import os
import re
import sys

WHY = re.compile(r"Failure|FAILED|Traceback|Error|error:|Expected|Which is|Value of|Actual|assert|exception|skipped",
                 re.IGNORECASE)
AFTER = 4  # lines kept after each line that says why
MOST = 60  # lines of reasons per test at the most
LAST = 10  # the test's last lines


def outputs(log):
    """{test name: [its output lines]} from ctest's LastTest.log."""
    found, name, lines, inside = {}, None, [], False
    for line in log:
        line = line.rstrip("\n")
        m = re.match(r"^\d+/\d+ Test: (.*)$", line)
        if m:
            name, lines, inside = m.group(1), [], False
        elif name and line == "Output:":
            inside = None  # the dashes line comes next
        elif name and inside is None:
            inside = True
        elif name and inside and line == "<end of output>":
            found[name], name, inside = lines, None, False
        elif name and inside:
            lines.append(line)
    return found


def reasons(lines):
    keep = set()
    for i, line in enumerate(lines):
        if WHY.search(line):
            keep.update(range(i, min(len(lines), i + AFTER + 1)))
    kept = sorted(keep)[:MOST]
    after = kept[-1] + 1 if kept else 0
    return [lines[i] for i in kept], lines[max(after, len(lines) - LAST):]


def main():
    tmp = os.path.join(sys.argv[1] if len(sys.argv) > 1 else ".", "Testing", "Temporary")
    try:
        with open(os.path.join(tmp, "LastTestsFailed.log")) as f:
            failed = [l.strip().split(":", 1)[1] for l in f if ":" in l]
        with open(os.path.join(tmp, "LastTest.log"), errors="replace") as f:
            out = outputs(f)
    except OSError as e:
        print(f"failed_tests_tail: {e}")
        return
    for name in failed:
        picked, tail = reasons(out.get(name, []))
        print(f"==== why {name} failed (its output's failure lines, then its last lines) ====")
        for line in picked:
            print(f"  {line}")
        if tail:
            print("  ...")
            for line in tail:
                print(f"  {line}")


if __name__ == "__main__":
    main()
