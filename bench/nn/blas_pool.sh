#!/usr/bin/env bash
# The BLAS pool's threads and denormals: a 256x256 GEMM whose products underflow (1e-22 * 1e-22),
# THREADS BLAS threads (default 2). troupe (nn_blas_pool_bench): the pool as the process finds it at main (started
# as OpenBLAS loaded, keeping denormals while main flushes) and after nn::restart_blas_threads(), as
# the troupe binary does. The peer, PyTorch 1.13's matmul with two threads, with its default (denormals
# kept) and with torch.set_flush_denormal(True). One JSON line per case: best and median ms over
# 30 calls, the outputs left denormal (computed by a thread that keeps denormals). TORCH_PYTHON: a
# Python with torch other than /usr/bin/python3 (the device machine's).
#   bash bench/nn/blas_pool.sh [BUILD_DIR] [THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build/release}" && pwd)
threads=${2:-2}
unset OMP_NUM_THREADS
# OpenBLAS starts a pool of this many threads as it loads (any number above 1: before main).
OPENBLAS_NUM_THREADS=$threads "$build/bench/nn/nn_blas_pool_bench" 256 30
for flush in 0 1; do
  "${TORCH_PYTHON:-/usr/bin/python3}" - "$flush" "$threads" <<'PY'
import json, sys, time, torch
torch.set_num_threads(int(sys.argv[2]))
flush = sys.argv[1] == "1"
torch.set_flush_denormal(flush)
n = 256
for v in (1e-22, 1.0):
    a, b = torch.full((n, n), v), torch.full((n, n), v)
    ms = []
    for _ in range(30):
        t0 = time.perf_counter()
        c = a @ b
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    bits = c.view(torch.int32)
    denormal = int(((bits & 0x7f800000) == 0).logical_and((bits & 0x7fffff) != 0).sum())
    print(json.dumps({"peer": "torch " + torch.__version__, "set_flush_denormal": flush, "values": v,
                      "threads": torch.get_num_threads(), "best_ms": round(ms[0], 3),
                      "median_ms": round(ms[len(ms) // 2], 3), "denormal_outputs": denormal}))
PY
done
