// The build without CUDA: norm_reducer reports not_built.
#include "troupe/gpu/norms.hpp"

namespace troupe::gpu {

expected<norm_reducer> norm_reducer::create() {
  return error(gpu_errc::not_built, "norm_reducer::create");
}
expected<double> norm_reducer::sqr(const float*, std::size_t, cuda_stream) {
  return error(gpu_errc::not_built, "norm_reducer::sqr");
}
expected<void> norm_reducer::keep(const float*, std::size_t, cuda_stream) {
  return error(gpu_errc::not_built, "norm_reducer::keep");
}
expected<void> norm_reducer::precondition(const float*, std::size_t, std::span<const std::size_t>, float,
                                          float, float, cuda_stream) {
  return error(gpu_errc::not_built, "norm_reducer::precondition");
}
expected<norm_reducer::pair> norm_reducer::with_kept(const float*, std::size_t, cuda_stream) {
  return error(gpu_errc::not_built, "norm_reducer::with_kept");
}
expected<void> norm_reducer::queue(const float*, std::size_t, bool, cuda_stream) {
  return error(gpu_errc::not_built, "norm_reducer::queue");
}
norm_reducer::pair norm_reducer::queued() const {
  return {};
}

}  // namespace troupe::gpu
