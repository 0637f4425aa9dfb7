#include "blas.hpp"

#include "check.hpp"

#include <string>

#ifndef TROUPE_GPU_EMULATION
#include <dlfcn.h>
#endif

namespace troupe::gpu {

#ifndef TROUPE_GPU_EMULATION
// cuBLAS is opened on first use, not linked: libcublasLt's start-up (hundreds of thousands of
// relocations over a 500 MB library) costs ~90 ms and ~200 MB of resident memory in every process
// that links it, and every troupe node, worker or CLI call would pay it. (cublas_v2.h maps the
// names to their _v2 symbols; TROUPE_SYM spells the symbol after that mapping.)
namespace {
#define TROUPE_SYM2(x) #x
#define TROUPE_SYM(x) TROUPE_SYM2(x)

struct cublas_api {
  decltype(&::cublasCreate) create = nullptr;
  decltype(&::cublasDestroy) destroy = nullptr;
  decltype(&::cublasSetStream) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSgemm) sgemm = nullptr;
  decltype(&::cublasGetStatusString) status_string = nullptr;
  std::string error;
};

template <class F>
bool bind(void* lib, F& f, const char* name, std::string& err) {
  f = reinterpret_cast<F>(::dlsym(lib, name));
  if (!f && err.empty()) err = std::string("dlsym ") + name + ": " + ::dlerror();
  return f != nullptr;
}

const cublas_api& api() {
  static const cublas_api a = [] {
    cublas_api r;
    void* lib = ::dlopen(TROUPE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = ::dlopen(TROUPE_CUBLAS_DIR "/" TROUPE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      r.error = std::string("dlopen " TROUPE_CUBLAS_SONAME ": ") + ::dlerror();
      return r;
    }
    bind(lib, r.create, TROUPE_SYM(cublasCreate), r.error);
    bind(lib, r.destroy, TROUPE_SYM(cublasDestroy), r.error);
    bind(lib, r.set_stream, TROUPE_SYM(cublasSetStream), r.error);
    bind(lib, r.set_math_mode, TROUPE_SYM(cublasSetMathMode), r.error);
    bind(lib, r.sgemm, TROUPE_SYM(cublasSgemm), r.error);
    bind(lib, r.status_string, TROUPE_SYM(cublasGetStatusString), r.error);
    return r;
  }();
  return a;
}
}  // namespace

#define TROUPE_CUBLAS(field, plain) (api().field)
#else
#define TROUPE_CUBLAS(field, plain) (plain)
#endif

expected<void> cublas_check(cublasStatus_t rc, const char* call) {
  if (rc == CUBLAS_STATUS_SUCCESS) return {};
#ifndef TROUPE_GPU_EMULATION
  const char* text = api().status_string ? api().status_string(rc) : "unknown status";
#else
  const char* text = cublasGetStatusString(rc);
#endif
  return error(gpu_errc::cublas_failed, std::string(call) + ": " + text);
}

expected<void> load_libraries() {
#ifndef TROUPE_GPU_EMULATION
  if (!api().error.empty()) return error(gpu_errc::cublas_failed, api().error);
#endif
  return {};
}

expected<blas_handle> blas_handle::create(cuda_stream s) {
#ifndef TROUPE_GPU_EMULATION
  if (!api().error.empty()) return error(gpu_errc::cublas_failed, api().error);
#endif
  cublasHandle_t h = nullptr;
  TROUPE_GPU_TRY(cublas_check(TROUPE_CUBLAS(create, cublasCreate)(&h), "cublasCreate"));
  blas_handle out(h);
  TROUPE_GPU_TRY(cublas_check(TROUPE_CUBLAS(set_stream, cublasSetStream)(h, s), "cublasSetStream"));
  TROUPE_GPU_TRY(cublas_check(TROUPE_CUBLAS(set_math_mode, cublasSetMathMode)(h, CUBLAS_DEFAULT_MATH),
                              "cublasSetMathMode"));
  return out;
}

blas_handle& blas_handle::operator=(blas_handle&& o) noexcept {
  if (this != &o) {
    if (h_) (void)TROUPE_CUBLAS(destroy, cublasDestroy)(h_);
    h_ = std::exchange(o.h_, nullptr);
  }
  return *this;
}

blas_handle::~blas_handle() {
  if (h_) (void)TROUPE_CUBLAS(destroy, cublasDestroy)(h_);
}

expected<void> gemm_rm(cublas_handle h, bool a_t, bool b_t, std::size_t m, std::size_t n, std::size_t k,
                       const float* a, const float* b, float beta, float* c) {
  const float alpha = 1.0f;
  // Column-major view: C^T [n, m] = op(B)^T [n, k] * op(A)^T [k, m]. Row-major X stored [r, c]
  // is column-major X^T with leading dimension c.
  const int lda = static_cast<int>(a_t ? m : k), ldb = static_cast<int>(b_t ? k : n);
  return cublas_check(
      TROUPE_CUBLAS(sgemm, cublasSgemm)(h, b_t ? CUBLAS_OP_T : CUBLAS_OP_N, a_t ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha,
                                        b, ldb, a, lda, &beta, c, static_cast<int>(n)),
      "cublasSgemm");
}

}  // namespace troupe::gpu
