#!/usr/bin/env bash
# Installs the dependencies, builds troupe (release) and runs the main example: an MLP on
# Fashion-MNIST trained by 4 worker processes with synchronous allreduce (the dataset is imported
# into jobs/datasets/ on the first run). Extra arguments go to `troupe run`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only what the demo needs (issue #45: the full list, with libtorch, chromium and Prometheus, took
# 4.5 of a fresh machine's 17.5 minutes to the demo's first result).
bash scripts/install-deps.sh --demo
bash scripts/build.sh release troupe
exec ./build/release/troupe run examples/fashion_mnist.toml "$@"
