#include <string>

#include "troupe/gpu/cuda.hpp"

namespace troupe::gpu {
namespace {
class gpu_category_impl final : public std::error_category {
 public:
  const char* name() const noexcept override { return "gpu"; }
  std::string message(int c) const override {
    switch (static_cast<gpu_errc>(c)) {
      case gpu_errc::ok:
        return "ok";
      case gpu_errc::no_device:
        return "no CUDA device";
      case gpu_errc::cuda_failed:
        return "cuda call failed";
      case gpu_errc::cublas_failed:
        return "cublas call failed";
      case gpu_errc::nccl_failed:
        return "nccl call failed";
      case gpu_errc::timeout:
        return "timed out";
      case gpu_errc::peer_lost:
        return "peer lost";
      case gpu_errc::unsupported:
        return "unsupported on GPU";
      case gpu_errc::not_built:
        return "troupe was built without CUDA";
    }
    return "unknown gpu error " + std::to_string(c);
  }
};
}  // namespace

const std::error_category& gpu_category() noexcept {
  static const gpu_category_impl instance;
  return instance;
}

namespace detail {
error size_mismatch(const char* what, std::size_t have, std::size_t want) {
  return error(gpu_errc::unsupported, std::string(what) + ": host span has " + std::to_string(have) +
                                          " elements, the buffer " + std::to_string(want));
}
}  // namespace detail

}  // namespace troupe::gpu
