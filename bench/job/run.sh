#!/usr/bin/env bash
# Job benchmarks, one run (JSON lines): time from `troupe run` to the first trained minibatch
# (one cold run that imports the dataset, then warm runs: median), end-to-end DeepFM on a
# Frappe-shaped synthetic dataset (2 PS + 4 workers, 10 epochs) vs PyTorch in one process
# (torch.set_num_threads(1): with 2 threads its OpenMP workers spin on this busy 2-core machine and
# it ran >5x slower) on the same exported records, and the convergence experiment
# (workers varied 2<->4 every second vs the fixed-4 run) with scale-up -> first-task latency.
# Needs the release build: cmake --preset release && cmake --build build/release -j2
set -euo pipefail
cd "$(dirname "$0")/../.."
exec /usr/bin/python3 bench/job/job_bench.py "$@"
