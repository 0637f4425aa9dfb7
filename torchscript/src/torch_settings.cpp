#include "torch_settings.hpp"

#include <ATen/Parallel.h>
#include <malloc.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <mutex>

#include "troupe/nn/blas.hpp"

namespace troupe::actors {

void configure_libtorch_once(int threads) {
  static std::once_flag once;
  std::call_once(once, [threads] {
    // The legacy executor: the profiling executor's first ~20 runs of a graph are slow, and its
    // steps were no cheaper after them (docs/benchmarks.md, "TorchScript path: where a step's time
    // goes"). Whether the legacy executor optimizes the graph made no difference either.
    torch::jit::getProfilingMode() = false;
    if (threads > 0) at::set_num_threads(threads);
    // libtorch's matrix products run on OpenBLAS, whose own thread pool at::set_num_threads does
    // not size: left at its default it spins a thread per core against the workers beside it.
    nn::set_blas_threads(threads);
    // libtorch allocates each step's activations and gradients anew (hundreds of KiB each): above
    // glibc's mmap threshold, or trimmed off the heap's top when freed, every step page-faults
    // them in again (14% of a step's time in a profile of the MLP). Keep them in the heap.
    ::mallopt(M_MMAP_THRESHOLD, 64 << 20);
    ::mallopt(M_TRIM_THRESHOLD, 256 << 20);
    ::mallopt(M_TOP_PAD, 64 << 20);
  });
}

}  // namespace troupe::actors
