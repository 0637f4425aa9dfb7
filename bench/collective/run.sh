#!/usr/bin/env bash
# Ring allreduce bus bandwidth, troupe (shared-memory ring) vs gloo through torch.distributed,
# at 2 and 4 ranks, 1 MB and 64 MB, in the same run. Needs a release build and
# `scripts/install-deps.sh --bench` (python3-torch). Prints JSON lines.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/release/bench/collective/allreduce_bench
for ranks in 2 4; do
  for mb in 1 64; do
    iters=$([[ $mb == 1 ]] && echo 200 || echo 20)
    $bin --ranks $ranks --mb $mb --iters $iters --capacity-kb ${CAPACITY_KB:-4096}
    /usr/bin/python3 bench/collective/gloo_allreduce.py $ranks $mb $iters
  done
done
