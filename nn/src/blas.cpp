#include "troupe/nn/blas.hpp"

#include <cblas.h>
#include <dlfcn.h>

#include "troupe/core/float_env.hpp"

namespace troupe::nn {

void set_blas_threads(int n) {
  if (n > 0) openblas_set_num_threads(n);
}

bool restart_blas_threads() {
  // OpenBLAS's own (exported, undeclared) shutdown: joins the pool and marks it unstarted; its
  // next parallel call starts it again (blas_server.c). Looked up so that another BLAS still links.
  using shutdown_fn = int (*)();
  static const auto shutdown = reinterpret_cast<shutdown_fn>(dlsym(RTLD_DEFAULT, "blas_thread_shutdown_"));
  if (!shutdown) return false;
  shutdown();
  return true;
}

bool flush_denormals_unless_kept_everywhere() {
  if (!flush_denormals_unless_kept()) return false;
  restart_blas_threads();
  return true;
}

}  // namespace troupe::nn
