#include <cmath>

#include "layer_util.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::nn {

expected<shape> batch_norm_layer::infer(std::span<const shape> in, std::uint64_t) {
  if (in[0].rank() != 1 && in[0].rank() != 3)
    return detail::shape_error(*this,
                               "expects [features] or [channels, height, width], got " + in[0].to_string());
  if (!(momentum_ >= 0 && momentum_ < 1) || !(eps_ > 0))
    return detail::shape_error(*this, "momentum must be in [0, 1) and epsilon > 0");
  c_ = in[0][0];
  spatial_ = in[0].size() / c_;
  detail::make_param(gamma_, name(), "gamma", {c_});
  detail::make_param(beta_, name(), "beta", {c_});
  detail::make_param(running_mean_, name(), "running_mean", {c_}, false);
  detail::make_param(running_var_, name(), "running_var", {c_}, false);
  gamma_.value.fill(1.0f);
  running_var_.value.fill(1.0f);
  return in[0];
}

void batch_norm_layer::forward(const forward_context& ctx, std::span<const tensor* const> in, tensor& out) {
  const std::size_t n = in[0]->dim(0), per = c_ * spatial_;
  const float* x = in[0]->data();
  inv_std_.resize(c_);
  xhat_.resize(in[0]->size());
  const double count = static_cast<double>(n * spatial_);
  for (std::size_t c = 0; c < c_; ++c) {
    float mean = running_mean_.value[c], var = running_var_.value[c];
    if (ctx.training) {
      double s = 0, s2 = 0;
      for (std::size_t b = 0; b < n; ++b)
        for (std::size_t i = 0; i < spatial_; ++i) {
          double v = x[b * per + c * spatial_ + i];
          s += v;
          s2 += v * v;
        }
      const double m = s / count;
      mean = static_cast<float>(m);
      var = static_cast<float>(std::max(0.0, s2 / count - m * m));
      running_mean_.value[c] = momentum_ * running_mean_.value[c] + (1 - momentum_) * mean;
      running_var_.value[c] = momentum_ * running_var_.value[c] + (1 - momentum_) * var;
    }
    const float inv = 1.0f / std::sqrt(var + eps_);
    inv_std_[c] = inv;
    const float g = gamma_.value[c], be = beta_.value[c];
    for (std::size_t b = 0; b < n; ++b)
      for (std::size_t i = 0; i < spatial_; ++i) {
        const std::size_t at = b * per + c * spatial_ + i;
        xhat_[at] = (x[at] - mean) * inv;
        out[at] = g * xhat_[at] + be;
      }
  }
}

void batch_norm_layer::backward(const forward_context& ctx, std::span<const tensor* const>, const tensor&,
                                const tensor& grad_out, std::span<tensor* const> grad_in) {
  const std::size_t n = grad_out.dim(0), per = c_ * spatial_;
  const float count = static_cast<float>(n * spatial_);
  for (std::size_t c = 0; c < c_; ++c) {
    double sg = 0, sgx = 0;
    for (std::size_t b = 0; b < n; ++b)
      for (std::size_t i = 0; i < spatial_; ++i) {
        const std::size_t at = b * per + c * spatial_ + i;
        sg += grad_out[at];
        sgx += grad_out[at] * xhat_[at];
      }
    gamma_.grad[c] = static_cast<float>(sgx);
    beta_.grad[c] = static_cast<float>(sg);
    if (!grad_in[0]) continue;
    const float k = gamma_.value[c] * inv_std_[c];
    // Training: the batch statistics depend on x too; evaluation: they are constants.
    const float mg = ctx.training ? static_cast<float>(sg) / count : 0.0f;
    const float mgx = ctx.training ? static_cast<float>(sgx) / count : 0.0f;
    for (std::size_t b = 0; b < n; ++b)
      for (std::size_t i = 0; i < spatial_; ++i) {
        const std::size_t at = b * per + c * spatial_ + i;
        (*grad_in[0])[at] = k * (grad_out[at] - mg - xhat_[at] * mgx);
      }
  }
}

}  // namespace troupe::nn
