#!/usr/bin/env bash
# `troupe train --local` of a scripted MLP (784-256-128-10, batch 64, Adam, 1 thread, one epoch of
# Fashion-MNIST) through the TorchScript backend, against the same module in an eager PyTorch loop
# (eager_mlp.py) and troupe's native MLP, in the same run. Prints one JSON line per system.
#   bash bench/torchscript/run.sh [BUILD_DIR] [RUNS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${1:-$root/build/release}
runs=${2:-3}
work=$(mktemp -d /tmp/troupe-torchscript-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
/usr/bin/python3 "$root/examples/torch/mlp.py" "$work/mlp.pt" > /dev/null
job() {  # $1: [model] lines
  cat <<TOML
[model]
$1
[train]
epochs = 1
batch_size = 64
optimizer = "adam"
learning_rate = 0.001
threads = 1
log_every = 0
[data]
source = "fashion-mnist"
dir = "/usr/share/datasets/fashion-mnist"
TOML
}
job "type = \"torchscript\"
path = \"$work/mlp.pt\"" > "$work/torch.toml"
job "type = \"mlp\"
hidden = [256, 128]" > "$work/native.toml"
for i in $(seq "$runs"); do
  for sys in torch native; do
    "$build/troupe" train --local "$work/$sys.toml" 2> /dev/null |
      /usr/bin/python3 -c "import json,sys; r=json.loads(sys.stdin.readlines()[-1]); print(json.dumps({'system': 'troupe train --local ($sys)', 'run': $i, 'samples_per_s': round(r['samples_per_s']), 'test_accuracy': round(r['test_accuracy'], 4)}))"
  done
  OMP_NUM_THREADS=1 /usr/bin/python3 "$here/eager_mlp.py" | /usr/bin/python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(json.dumps({'system': r['peer'], 'run': $i, 'samples_per_s': round(r['samples_per_s']), 'test_accuracy': round(r['test_accuracy'], 4)}))"
done
