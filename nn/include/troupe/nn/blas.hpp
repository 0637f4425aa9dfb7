// The BLAS library's threads: how many, and the floating-point mode they compute in.
#pragma once

namespace troupe::nn {

// Sets the number of OpenBLAS threads (n > 0).
void set_blas_threads(int n);

// Stops the BLAS library's thread pool, so that its next parallel call starts it again from the
// calling thread, whose floating-point mode the new threads inherit. OpenBLAS starts its pool as it
// loads, before main, unless OPENBLAS_NUM_THREADS=1: those threads keep denormals whatever main
// sets afterwards, and a product that underflows costs them a microcode assist (a 256^3 GEMM of
// such products on two threads: 21.7 ms, 0.15 ms after a restart; docs/benchmarks.md, "The BLAS
// pool's threads"). Call with no BLAS call in flight. Returns false where the library has no pool to stop
// (not OpenBLAS's pthread build).
bool restart_blas_threads();

// What troupe's processes do first in main: troupe::flush_denormals_unless_kept() (core/float_env.hpp)
// and, when it flushed, restart_blas_threads(), so that every thread of the process flushes, the
// BLAS pool's too. Returns whether it flushed.
bool flush_denormals_unless_kept_everywhere();

}  // namespace troupe::nn
