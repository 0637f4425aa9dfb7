#!/usr/bin/env python3
"""Fails when production code of wire/, control/, cluster/ or actors/ names std::chrono::steady_clock.

Every deadline and timeout of those modules reads the injected troupe::clock (core/clock.hpp), so
that their unit tests can run on a manual clock (docs/architecture.md, "One clock"). Naming
steady_clock is how code reads time behind the clock's back: directly (steady_clock::now()) or
through an alias (`using steady = std::chrono::steady_clock;`), whose definition names it too.
Comments are not code and are skipped. The files below still read it, each for the reason given;
a file leaves the list when it takes the clock.
"""
import os
import re
import sys

CHECKED = ["wire", "control", "cluster", "actors"]

ALLOWED = {
    # This process's own pauses (SIGSTOP, a stalled host) are gaps of real time: a manual clock
    # cannot pause.
    "actors/src/master/pause_watch.hpp": "measures real pauses of its own process",
    # Not converted yet (issue #26 item 5 lists rpc, the fetcher, the master's counters, the runner
    # and the launchers): the node process's plumbing, the PS shard, the GPU rendezvous client.
    "actors/src/node/node_main.cpp": "not converted yet: node process main loop",
    "actors/src/node/node_runtime.cpp": "not converted yet: node runtime waits",
    "actors/src/worker/gpu_comm_client.cpp": "not converted yet: GPU rendezvous deadline",
    "actors/src/ps/ps_checkpoint_log.cpp": "not converted yet: PS checkpoint log timing",
    "actors/src/ps/ps_snapshot.cpp": "not converted yet: PS snapshot time budget",
    "actors/src/worker/strategies/replicas.cpp": "logs how long a resync took (a measurement, no deadline)",
    # How long a standby's preload took and how long it waited for an identity: log lines, no
    # deadline (the standby runs before the node and its clock exist).
    "actors/src/node/standby.cpp": "logs a standby's real preload and wait times",
    "actors/src/worker/backends/host_backend.cpp": "logs the TorchScript module's real preload time",
}

COMMENT = re.compile(r"//.*$")


def main(root):
    problems = []
    seen = set()
    for module in CHECKED:
        for dirpath, _, files in os.walk(os.path.join(root, module)):
            for name in sorted(files):
                if not name.endswith((".cpp", ".hpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                in_block = False
                for n, line in enumerate(open(path, encoding="utf-8"), 1):
                    # Block comments: skipped whole lines only (the tree writes // comments).
                    if in_block:
                        in_block = "*/" not in line
                        continue
                    if line.lstrip().startswith("/*"):
                        in_block = "*/" not in line
                        continue
                    if "steady_clock" not in COMMENT.sub("", line):
                        continue
                    seen.add(rel)
                    if rel not in ALLOWED:
                        problems.append(f"{rel}:{n}: reads std::chrono::steady_clock; take a troupe::clock& "
                                        "(core/clock.hpp) instead")
    for rel in sorted(set(ALLOWED) - seen):
        print(f"note: {rel} no longer names steady_clock: remove it from ALLOWED", file=sys.stderr)
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        print(f"{len(problems)} direct read(s) of steady_clock outside the clock (docs/architecture.md)",
              file=sys.stderr)
        return 1
    print(f"no direct steady_clock reads in {', '.join(CHECKED)} outside {len(ALLOWED)} listed files")
    return 0


if __name__ == "__main__":
    sys.exit(main(os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")))
