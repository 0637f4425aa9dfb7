// The build without CUDA: the device layers, optimizers and trainer report not_built.
#include "troupe/gpu/layers.hpp"
#include "troupe/gpu/trainer.hpp"

namespace troupe::gpu {

namespace {
error not_built(const char* what) {
  return error(gpu_errc::not_built, what);
}
}  // namespace

expected<blas_handle> blas_handle::create(cuda_stream) {
  return not_built("blas_handle::create");
}
blas_handle& blas_handle::operator=(blas_handle&& o) noexcept {
  h_ = std::exchange(o.h_, nullptr);
  return *this;
}
blas_handle::~blas_handle() = default;

expected<std::unique_ptr<device_layer>> make_device_layer(nn::layer&, std::span<const nn::shape>,
                                                          const nn::shape&) {
  return not_built("make_device_layer");
}
expected<void> device_layer::download_sparse_grad(nn::sparse_grad&, cuda_stream) {
  return not_built("download_sparse_grad");
}
expected<void> loss_forward(nn::loss_kind, const float*, const float*, std::size_t, std::size_t, float*,
                            float*, float*, cuda_stream) {
  return not_built("loss_forward");
}
expected<void> loss_backward(nn::loss_kind, const float*, const float*, std::size_t, std::size_t, float*,
                             cuda_stream) {
  return not_built("loss_backward");
}
expected<std::unique_ptr<device_optimizer>> device_optimizer::create(const nn::optimizer_config&) {
  return not_built("device_optimizer::create");
}
expected<std::unique_ptr<device_trainer>> device_trainer::create(int, nn::model&, const nn::train_config&) {
  return not_built("device_trainer::create");
}

}  // namespace troupe::gpu
