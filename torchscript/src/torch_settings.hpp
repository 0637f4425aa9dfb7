// Process-wide libtorch settings for the TorchScript backend, applied once before the first
// module is loaded (libtorch reads them when it first runs a graph or a parallel region).
#pragma once

namespace troupe::actors {

// `threads`: libtorch's intra-op threads and OpenBLAS' ([train] threads; 0 leaves both at their
// defaults). Thread-safe; calls after the first do nothing, whatever their argument.
void configure_libtorch_once(int threads);

}  // namespace troupe::actors
