// The floating-point environment of troupe's processes.
#pragma once

namespace troupe {

// Denormal floats (magnitudes below 1.2e-38) flushed to zero, as TensorFlow's and XLA's CPU
// threads do. Adam's update squares gradients, some of which are tiny enough that the square
// lands there, and every arithmetic operation on a denormal takes a microcode assist: the main
// example's MLP (Adam, Fashion-MNIST) trained its second and later epochs about 2x slower than
// its first (docs/benchmarks.md, "Denormals flushed"). Sets flush-to-zero and denormals-are-zero
// on the calling thread (x86-64: MXCSR's FTZ and DAZ; aarch64: FPCR.FZ); threads created after
// inherit the setting, threads that exist already (a BLAS pool started before main) do not. Call
// once, first in main(), before threads start. Returns false where the CPU has no such mode.
bool flush_denormals();

// flush_denormals() unless the environment has TROUPE_KEEP_DENORMALS=1 (IEEE's gradual underflow
// kept, docs/nn.md). Returns whether it flushed. troupe's processes call it through
// nn::flush_denormals_unless_kept_everywhere(), which restarts the BLAS pool after it.
bool flush_denormals_unless_kept();

// Whether the calling thread flushes denormals (flush_denormals() took effect on it or its creator).
bool denormals_flushed();

}  // namespace troupe
