#include <cblas.h>

#include <algorithm>
#include <cstring>

#include "layer_util.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::nn {

expected<shape> dense_layer::infer(std::span<const shape> in, std::uint64_t seed) {
  if (units_ == 0) return detail::shape_error(*this, "units must be > 0");
  in_ = in[0].size();
  if (in_ == 0) return detail::shape_error(*this, "empty input " + in[0].to_string());
  detail::make_param(weight_, name(), "weight", {in_, units_});
  detail::make_param(bias_, name(), "bias", {units_});
  detail::glorot_uniform(weight_.value, in_, units_, seed);
  return shape{units_};
}

void dense_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const auto n = static_cast<int>(in[0]->dim(0));
  const float* b = bias_.value.data();
  float* y = out.data();
  for (int i = 0; i < n; ++i)
    std::memcpy(y + static_cast<std::size_t>(i) * units_, b, units_ * sizeof(float));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, static_cast<int>(units_), static_cast<int>(in_),
              1.0f, in[0]->data(), static_cast<int>(in_), weight_.value.data(), static_cast<int>(units_),
              1.0f, y, static_cast<int>(units_));
}

void dense_layer::backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                           const tensor& grad_out, std::span<tensor* const> grad_in) {
  const auto n = static_cast<int>(in[0]->dim(0));
  const int units = static_cast<int>(units_), inputs = static_cast<int>(in_);
  // dW = x^T dy ; db = column sums of dy ; dx = dy W^T
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, inputs, units, n, 1.0f, in[0]->data(), inputs,
              grad_out.data(), units, 0.0f, weight_.grad.data(), units);
  float* db = bias_.grad.data();
  std::fill(db, db + units_, 0.0f);
  const float* g = grad_out.data();
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < units; ++j) db[j] += g[static_cast<std::size_t>(i) * units_ + j];
  if (grad_in[0])
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, inputs, units, 1.0f, g, units,
                weight_.value.data(), units, 0.0f, grad_in[0]->data(), inputs);
}

}  // namespace troupe::nn
