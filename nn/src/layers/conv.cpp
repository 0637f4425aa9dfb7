#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "layer_util.hpp"
#include "troupe/nn/layers.hpp"

namespace troupe::nn {

expected<shape> conv2d_layer::infer(std::span<const shape> in, std::uint64_t seed) {
  if (in[0].rank() != 3)
    return detail::shape_error(*this, "expects [channels, height, width], got " + in[0].to_string());
  if (filters_ == 0 || k_ == 0) return detail::shape_error(*this, "filters and kernel must be > 0");
  c_ = in[0][0], h_ = in[0][1], w_ = in[0][2];
  if (h_ + 2 * pad_ < k_ || w_ + 2 * pad_ < k_)
    return detail::shape_error(
        *this, "kernel " + std::to_string(k_) + " larger than the padded input " + in[0].to_string());
  oh_ = h_ + 2 * pad_ - k_ + 1;
  ow_ = w_ + 2 * pad_ - k_ + 1;
  const std::size_t ckk = c_ * k_ * k_;
  detail::make_param(weight_, name(), "weight", {filters_, ckk});
  detail::make_param(bias_, name(), "bias", {filters_});
  detail::glorot_uniform(weight_.value, ckk, filters_ * k_ * k_, seed);
  return shape{filters_, oh_, ow_};
}

void conv2d_layer::im2col(const float* x, float* col, std::size_t ld) const {
  for (std::size_t c = 0; c < c_; ++c)
    for (std::size_t ki = 0; ki < k_; ++ki)
      for (std::size_t kj = 0; kj < k_; ++kj) {
        float* row = col + ((c * k_ + ki) * k_ + kj) * ld;
        for (std::size_t oy = 0; oy < oh_; ++oy) {
          const long iy = static_cast<long>(oy + ki) - static_cast<long>(pad_);
          float* dst = row + oy * ow_;
          if (iy < 0 || iy >= static_cast<long>(h_)) {
            std::fill(dst, dst + ow_, 0.0f);
            continue;
          }
          const float* src = x + (c * h_ + static_cast<std::size_t>(iy)) * w_;
          if (pad_ == 0) {
            std::memcpy(dst, src + kj, ow_ * sizeof(float));
            continue;
          }
          for (std::size_t ox = 0; ox < ow_; ++ox) {
            const long ix = static_cast<long>(ox + kj) - static_cast<long>(pad_);
            dst[ox] = ix < 0 || ix >= static_cast<long>(w_) ? 0.0f : src[ix];
          }
        }
      }
}

void conv2d_layer::col2im(const float* col, std::size_t ld, float* x) const {
  std::fill(x, x + c_ * h_ * w_, 0.0f);
  for (std::size_t c = 0; c < c_; ++c)
    for (std::size_t ki = 0; ki < k_; ++ki)
      for (std::size_t kj = 0; kj < k_; ++kj) {
        const float* row = col + ((c * k_ + ki) * k_ + kj) * ld;
        for (std::size_t oy = 0; oy < oh_; ++oy) {
          const long iy = static_cast<long>(oy + ki) - static_cast<long>(pad_);
          if (iy < 0 || iy >= static_cast<long>(h_)) continue;
          float* dst = x + (c * h_ + static_cast<std::size_t>(iy)) * w_;
          const float* src = row + oy * ow_;
          if (pad_ == 0) {
            float* __restrict d = dst + kj;
            for (std::size_t ox = 0; ox < ow_; ++ox) d[ox] += src[ox];
            continue;
          }
          for (std::size_t ox = 0; ox < ow_; ++ox) {
            const long ix = static_cast<long>(ox + kj) - static_cast<long>(pad_);
            if (ix >= 0 && ix < static_cast<long>(w_)) dst[ix] += src[ox];
          }
        }
      }
}

// Examples per GEMM: up to chunk_, fewer where the chunk's im2col buffer would outgrow ~2 MiB (about
// a core's L2): at 32, the CNN example's second conv (32x26x26 -> 64x24x24) had col and dcol buffers
// of 21 MB each and streamed every GEMM from memory (forward + backward of a batch of 64: 92 ms; 55-65
// ms at 1-4 examples a chunk, docs/benchmarks.md).
std::size_t conv2d_layer::examples_per_chunk() const {
  constexpr std::size_t col_budget = std::size_t{2} << 20;
  const std::size_t per_example = c_ * k_ * k_ * oh_ * ow_ * sizeof(float);
  return std::clamp<std::size_t>(col_budget / std::max<std::size_t>(per_example, 1), 1, chunk_);
}

// The batch is processed in chunks of up to examples_per_chunk() examples, one GEMM per chunk:
// Y[F, m*P] = W[F, CKK] x col[CKK, m*P], P = OH*OW. Backward recomputes the chunk's im2col
// (cheap next to the GEMMs) so memory stays bounded whatever the batch size.
void conv2d_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const std::size_t n = in[0]->dim(0), p = oh_ * ow_, ckk = c_ * k_ * k_, chunk = examples_per_chunk();
  for (std::size_t first = 0; first < n; first += chunk) {
    const std::size_t m = std::min(chunk, n - first), ld = m * p;
    col_.resize(ckk * ld);
    y_.resize(filters_ * ld);
    for (std::size_t b = 0; b < m; ++b)
      im2col(in[0]->data() + (first + b) * c_ * h_ * w_, col_.data() + b * p, ld);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(filters_), static_cast<int>(ld),
                static_cast<int>(ckk), 1.0f, weight_.value.data(), static_cast<int>(ckk), col_.data(),
                static_cast<int>(ld), 0.0f, y_.data(), static_cast<int>(ld));
    for (std::size_t b = 0; b < m; ++b)
      for (std::size_t f = 0; f < filters_; ++f) {
        const float* src = y_.data() + f * ld + b * p;
        float* dst = out.data() + ((first + b) * filters_ + f) * p;
        const float bias = bias_.value[f];
        for (std::size_t i = 0; i < p; ++i) dst[i] = src[i] + bias;
      }
  }
}

void conv2d_layer::backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                            const tensor& grad_out, std::span<tensor* const> grad_in) {
  const std::size_t n = in[0]->dim(0), p = oh_ * ow_, ckk = c_ * k_ * k_, chunk = examples_per_chunk();
  bias_.grad.zero();
  for (std::size_t first = 0; first < n; first += chunk) {
    const std::size_t m = std::min(chunk, n - first), ld = m * p;
    col_.resize(ckk * ld);
    y_.resize(filters_ * ld);
    for (std::size_t b = 0; b < m; ++b)
      im2col(in[0]->data() + (first + b) * c_ * h_ * w_, col_.data() + b * p, ld);
    // dY in the [F, m*P] layout, bias gradient on the way.
    for (std::size_t b = 0; b < m; ++b)
      for (std::size_t f = 0; f < filters_; ++f) {
        const float* src = grad_out.data() + ((first + b) * filters_ + f) * p;
        float* dst = y_.data() + f * ld + b * p;
        float s = 0;
        for (std::size_t i = 0; i < p; ++i) {
          dst[i] = src[i];
          s += src[i];
        }
        bias_.grad[f] += s;
      }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(filters_), static_cast<int>(ckk),
                static_cast<int>(ld), 1.0f, y_.data(), static_cast<int>(ld), col_.data(),
                static_cast<int>(ld), first == 0 ? 0.0f : 1.0f, weight_.grad.data(), static_cast<int>(ckk));
    if (!grad_in[0]) continue;
    dcol_.resize(ckk * ld);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(ckk), static_cast<int>(ld),
                static_cast<int>(filters_), 1.0f, weight_.value.data(), static_cast<int>(ckk), y_.data(),
                static_cast<int>(ld), 0.0f, dcol_.data(), static_cast<int>(ld));
    for (std::size_t b = 0; b < m; ++b)
      col2im(dcol_.data() + b * p, ld, grad_in[0]->data() + (first + b) * c_ * h_ * w_);
  }
}

expected<shape> maxpool2d_layer::infer(std::span<const shape> in, std::uint64_t) {
  if (in[0].rank() != 3)
    return detail::shape_error(*this, "expects [channels, height, width], got " + in[0].to_string());
  if (pool_ == 0) return detail::shape_error(*this, "pool must be > 0");
  c_ = in[0][0], h_ = in[0][1], w_ = in[0][2];
  oh_ = h_ / pool_, ow_ = w_ / pool_;
  if (oh_ == 0 || ow_ == 0)
    return detail::shape_error(*this,
                               "pool " + std::to_string(pool_) + " larger than input " + in[0].to_string());
  return shape{c_, oh_, ow_};
}

void maxpool2d_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const std::size_t planes = in[0]->dim(0) * c_;
  argmax_.resize(planes * oh_ * ow_);
  for (std::size_t pl = 0; pl < planes; ++pl) {
    const float* x = in[0]->data() + pl * h_ * w_;
    for (std::size_t oy = 0; oy < oh_; ++oy)
      for (std::size_t ox = 0; ox < ow_; ++ox) {
        float best = -std::numeric_limits<float>::infinity();
        std::uint32_t at = 0;
        for (std::size_t i = 0; i < pool_; ++i)
          for (std::size_t j = 0; j < pool_; ++j) {
            const std::size_t idx = (oy * pool_ + i) * w_ + ox * pool_ + j;
            if (x[idx] > best) best = x[idx], at = static_cast<std::uint32_t>(idx);
          }
        const std::size_t o = (pl * oh_ + oy) * ow_ + ox;
        out[o] = best;
        argmax_[o] = at;
      }
  }
}

void maxpool2d_layer::backward(const forward_context&, std::span<const tensor* const>, const tensor&,
                               const tensor& grad_out, std::span<tensor* const> grad_in) {
  if (!grad_in[0]) return;
  grad_in[0]->zero();
  const std::size_t planes = grad_out.dim(0) * c_, per = oh_ * ow_;
  for (std::size_t pl = 0; pl < planes; ++pl) {
    float* dx = grad_in[0]->data() + pl * h_ * w_;
    for (std::size_t o = 0; o < per; ++o) dx[argmax_[pl * per + o]] += grad_out[pl * per + o];
  }
}

}  // namespace troupe::nn
