#!/usr/bin/env bash
# GPU training throughput: troupe's device_trainer (gpu_bench) and PyTorch CUDA (torch_gpu.py),
# same models, batches and optimizers, one after the other in the same run. JSON lines on stdout.
# Without a GPU both print the reason they skipped.
# Usage: bench/gpu/run.sh [build dir, default build/release] [--steps N] [--rounds R]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="${1:-$root/build/release}"
shift || true
bench="$build/bench/gpu/gpu_bench"
if [[ ! -x "$bench" ]]; then
  echo "{\"bench\": \"gpu_train\", \"error\": \"$bench not built: cmake --build $build --target gpu_bench\"}"
  exit 1
fi
"$bench" "$@"
# The first python that has a CUDA-enabled torch; Debian's /usr/bin/python3 has a CPU-only one.
py=""
for cand in ${TORCH_PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 &&
     "$cand" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    py="$cand"
    break
  fi
done
"${py:-/usr/bin/python3}" "$here/torch_gpu.py" "$@"
