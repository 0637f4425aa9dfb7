#!/usr/bin/env bash
# Installs the dependencies, builds troupe (release) and runs the main example: an MLP on
# Fashion-MNIST trained by 4 worker processes with synchronous allreduce (the dataset is imported
# into jobs/datasets/ on the first run). Extra arguments go to `troupe run`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh release troupe
exec ./build/release/troupe run examples/fashion_mnist.toml "$@"
