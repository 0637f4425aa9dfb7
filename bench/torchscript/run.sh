#!/usr/bin/env bash
# `troupe train --local` of a scripted MLP (784-256-128-10, batch 64, Adam, 1 thread, Fashion-MNIST)
# through the TorchScript backend, against the same module in an eager PyTorch loop (eager_mlp.py)
# and troupe's native MLP, interleaved run by run, every system on the same core with one thread
# (mlp_bench.py says how each is timed). Prints one JSON line per system and run, then a summary
# (ratios TorchScript/eager per run, median, min).
#   bash bench/torchscript/run.sh [BUILD_DIR] [RUNS] [mlp_bench.py options: --epochs 3 --cpu N --max-load 1.5]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build/release}
runs=${2:-5}
shift $(($# < 2 ? $# : 2))
exec /usr/bin/python3 "$here/mlp_bench.py" --build "$build" --runs "$runs" "$@"
