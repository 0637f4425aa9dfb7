#include <cmath>
#include <cstring>

#include "layer_util.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::nn {

void relu_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const float* __restrict x = in[0]->data();
  float* __restrict y = out.data();
  for (std::size_t i = 0, n = out.size(); i < n; ++i) y[i] = x[i] > 0 ? x[i] : 0.0f;
}

void relu_layer::backward(const forward_context&, std::span<const tensor* const>, const tensor& out,
                          const tensor& grad_out, std::span<tensor* const> grad_in) {
  if (!grad_in[0]) return;
  const float* __restrict y = out.data();
  const float* __restrict g = grad_out.data();
  float* __restrict dx = grad_in[0]->data();
  // Both loads unconditional so that the loop vectorises (a select, no branch).
  for (std::size_t i = 0, n = out.size(); i < n; ++i) {
    const float gi = g[i];
    dx[i] = y[i] > 0.0f ? gi : 0.0f;
  }
}

void sigmoid_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const float* x = in[0]->data();
  float* y = out.data();
  for (std::size_t i = 0, n = out.size(); i < n; ++i) y[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

void sigmoid_layer::backward(const forward_context&, std::span<const tensor* const>, const tensor& out,
                             const tensor& grad_out, std::span<tensor* const> grad_in) {
  if (!grad_in[0]) return;
  const float* y = out.data();
  const float* g = grad_out.data();
  float* dx = grad_in[0]->data();
  for (std::size_t i = 0, n = out.size(); i < n; ++i) dx[i] = g[i] * y[i] * (1.0f - y[i]);
}

expected<shape> dropout_layer::infer(std::span<const shape> in, std::uint64_t seed) {
  if (!(rate_ >= 0 && rate_ < 1))
    return detail::shape_error(*this, "rate must be in [0, 1), got " + std::to_string(rate_));
  seed_ = seed;
  return in[0];
}

void dropout_layer::forward(const forward_context& ctx, std::span<const tensor* const> in, tensor& out) {
  active_ = ctx.training && rate_ > 0;
  const std::size_t n = out.size();
  if (!active_) {
    std::memcpy(out.data(), in[0]->data(), n * sizeof(float));
    return;
  }
  mask_.resize(n);
  const float keep_scale = 1.0f / (1.0f - rate_);
  const std::uint64_t threshold =
      static_cast<std::uint64_t>(static_cast<double>(rate_) * 18446744073709551615.0);
  const std::uint64_t base = mix3(seed_, ctx.step, 0x0d0d);
  const float* x = in[0]->data();
  float* y = out.data();
  for (std::size_t i = 0; i < n; ++i) {
    mask_[i] = splitmix64(base + i) >= threshold ? keep_scale : 0.0f;
    y[i] = x[i] * mask_[i];
  }
}

void dropout_layer::backward(const forward_context&, std::span<const tensor* const>, const tensor&,
                             const tensor& grad_out, std::span<tensor* const> grad_in) {
  if (!grad_in[0]) return;
  const std::size_t n = grad_out.size();
  if (!active_) {
    std::memcpy(grad_in[0]->data(), grad_out.data(), n * sizeof(float));
    return;
  }
  for (std::size_t i = 0; i < n; ++i) (*grad_in[0])[i] = grad_out[i] * mask_[i];
}

expected<shape> flatten_layer::infer(std::span<const shape> in, std::uint64_t) {
  return shape{in[0].size()};
}

void flatten_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  std::memcpy(out.data(), in[0]->data(), out.size() * sizeof(float));
}

void flatten_layer::backward(const forward_context&, std::span<const tensor* const>, const tensor&,
                             const tensor& grad_out, std::span<tensor* const> grad_in) {
  if (grad_in[0]) std::memcpy(grad_in[0]->data(), grad_out.data(), grad_out.size() * sizeof(float));
}

expected<shape> concat_layer::infer(std::span<const shape> in, std::uint64_t) {
  if (in.empty()) return detail::shape_error(*this, "needs at least one input");
  std::size_t total = 0;
  for (const auto& s : in) total += s.size();
  return shape{total};
}

void concat_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const std::size_t n = out.dim(0), width = out.row_size();
  std::size_t offset = 0;
  for (const tensor* t : in) {
    const std::size_t w = t->row_size();
    for (std::size_t b = 0; b < n; ++b)
      std::memcpy(out.data() + b * width + offset, t->data() + b * w, w * sizeof(float));
    offset += w;
  }
}

void concat_layer::backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                            const tensor& grad_out, std::span<tensor* const> grad_in) {
  const std::size_t n = grad_out.dim(0), width = grad_out.row_size();
  std::size_t offset = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::size_t w = in[i]->row_size();
    if (grad_in[i])
      for (std::size_t b = 0; b < n; ++b)
        std::memcpy(grad_in[i]->data() + b * w, grad_out.data() + b * width + offset, w * sizeof(float));
    offset += w;
  }
}

expected<shape> add_layer::infer(std::span<const shape> in, std::uint64_t) {
  if (in.empty()) return detail::shape_error(*this, "needs at least one input");
  for (const auto& s : in)
    if (!(s == in[0]))
      return detail::shape_error(*this,
                                 "input shapes differ: " + in[0].to_string() + " and " + s.to_string());
  return in[0];
}

void add_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  std::memcpy(out.data(), in[0]->data(), out.size() * sizeof(float));
  for (std::size_t k = 1; k < in.size(); ++k)
    for (std::size_t i = 0; i < out.size(); ++i) out[i] += (*in[k])[i];
}

void add_layer::backward(const forward_context&, std::span<const tensor* const>, const tensor&,
                         const tensor& grad_out, std::span<tensor* const> grad_in) {
  for (tensor* g : grad_in)
    if (g) std::memcpy(g->data(), grad_out.data(), grad_out.size() * sizeof(float));
}

void sum_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const std::size_t n = out.dim(0), w = in[0]->row_size();
  for (std::size_t b = 0; b < n; ++b) {
    float s = 0;
    for (std::size_t i = 0; i < w; ++i) s += (*in[0])[b * w + i];
    out[b] = s;
  }
}

void sum_layer::backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                         const tensor& grad_out, std::span<tensor* const> grad_in) {
  if (!grad_in[0]) return;
  const std::size_t n = grad_out.dim(0), w = in[0]->row_size();
  for (std::size_t b = 0; b < n; ++b)
    for (std::size_t i = 0; i < w; ++i) (*grad_in[0])[b * w + i] = grad_out[b];
}

}  // namespace troupe::nn
