#!/usr/bin/env bash
# Denormals flushed or kept: `troupe train --local` of the main example's MLP (examples/fashion_mnist.toml:
# 784-256-128-10, Adam, batch 64, Fashion-MNIST) with troupe's default (flushed, core/float_env.hpp)
# and with TROUPE_KEEP_DENORMALS=1, against the peer, the same MLP in an eager PyTorch loop
# (bench/torchscript/eager_mlp.py), with torch's default (kept) and with torch.set_flush_denormal(True).
# Every system on the same core with one thread, interleaved round by round. Prints one line per
# system and round: the seconds of each epoch (training and its evaluation) and the test accuracy.
#   bash bench/nn/denormals.sh [BUILD_DIR] [ROUNDS] [EPOCHS] [CPU]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
rounds=${2:-3}
epochs=${3:-4}
cpu=${4:-$(($(nproc) - 1))}
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
per_epoch='import json, sys
d = json.loads(sys.stdin.read().strip().splitlines()[-1])
s = d.get("seconds") or [h["seconds"] for h in d["history"]]
print("epochs", [round(b - a, 3) for a, b in zip([0] + s, s)], "accuracy", round(d["test_accuracy"], 4))'
troupe() {
  taskset -c "$cpu" "$build/troupe" train --local "$root/examples/fashion_mnist.toml" --set "train.epochs=$epochs" \
    --set train.log_every=0 2>/dev/null | /usr/bin/python3 -c "$per_epoch"
}
torch() {
  taskset -c "$cpu" /usr/bin/python3 -c "import runpy, sys, torch
torch.set_flush_denormal(sys.argv[1] == 'flush')
sys.argv = ['eager_mlp.py', '--epochs', sys.argv[2]]
runpy.run_path('$root/bench/torchscript/eager_mlp.py', run_name='__main__')" "$1" "$epochs" | /usr/bin/python3 -c "$per_epoch"
}
for round in $(seq 1 "$rounds"); do
  echo "round $round troupe flushed (default):      $(troupe)"
  echo "round $round troupe TROUPE_KEEP_DENORMALS=1: $(TROUPE_KEEP_DENORMALS=1 troupe)"
  echo "round $round torch default (kept):          $(torch keep)"
  echo "round $round torch set_flush_denormal(True): $(torch flush)"
done
