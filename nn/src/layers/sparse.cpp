#include <cstring>

#include "layer_util.hpp"
#include "troupe/nn/layers.hpp"
#include "troupe/nn/sparse_batch.hpp"

namespace troupe::nn {

expected<shape> embedding_layer::infer(std::span<const shape>, std::uint64_t seed) {
  if (dim_ == 0) return detail::shape_error(*this, "dim must be > 0");
  if (fields_ == 0) {
    if (available_ <= first_)
      return detail::shape_error(*this, "the data has " + std::to_string(available_) +
                                            " sparse fields, none from field " + std::to_string(first_));
    fields_ = available_ - first_;
  }
  if (first_ + fields_ > available_)
    return detail::shape_error(*this, "fields [" + std::to_string(first_) + ", " +
                                          std::to_string(first_ + fields_) + ") but the data has " +
                                          std::to_string(available_) + " sparse fields");
  embedding_init init;
  init.type = scale_ > 0 ? embedding_init::kind::normal : embedding_init::kind::zeros;
  init.scale = scale_;
  table_ = std::make_unique<embedding_table>(name(), dim_, seed, init);
  return shape{fields_, dim_};
}

// The batch's ids of this layer's fields, row after row, into ids_.
void embedding_layer::take_ids(const batch& b) {
  ids_.resize(b.size() * fields_);
  for (std::size_t i = 0; i < b.size(); ++i)
    std::memcpy(ids_.data() + i * fields_, b.sparse_row(i) + first_, fields_ * sizeof(std::uint64_t));
}

// Each distinct id looked up once (sparse_batch): a row_store lookup and an out-of-line copy per
// occurrence were a quarter of a DeepFM step.
void embedding_layer::forward(const forward_context& ctx, std::span<const tensor* const>, tensor& out) {
  take_ids(*ctx.input);
  rows_.gather(ids_, *table_, out.data());
}

void embedding_layer::backward(const forward_context& ctx, std::span<const tensor* const>, const tensor&,
                               const tensor& grad_out, std::span<tensor* const>) {
  take_ids(*ctx.input);
  // The gradient of the batch last gathered (a forward of another batch in between: gathered again,
  // into scratch rows, so that the combine's indices are this batch's).
  if (!rows_.gathered(ids_)) {
    scratch_.resize(ids_.size() * dim_);
    rows_.gather(ids_, *table_, scratch_.data());
  }
  rows_.combine(grad_out.data(), dim_, table_->grad());
}

void embedding_layer::collect_ids(const batch& b, std::vector<std::uint64_t>& out) const {
  for (std::size_t i = 0; i < b.size(); ++i)
    out.insert(out.end(), b.sparse_row(i) + first_, b.sparse_row(i) + first_ + fields_);
}

expected<shape> input_layer::infer(std::span<const shape>, std::uint64_t) {
  if (shape_.size() == 0) return detail::shape_error(*this, "the data has no dense features");
  return shape_;
}

void input_layer::forward(const forward_context& ctx, std::span<const tensor* const>, tensor& out) {
  const batch& b = *ctx.input;
  const std::size_t w = shape_.size();
  if (b.contiguous()) {
    std::memcpy(out.data(), b.dense_row(0), b.size() * w * sizeof(float));
    return;
  }
  for (std::size_t i = 0; i < b.size(); ++i)
    std::memcpy(out.data() + i * w, b.dense_row(i), w * sizeof(float));
}

expected<shape> fm_layer::infer(std::span<const shape> in, std::uint64_t) {
  if (in[0].rank() != 2)
    return detail::shape_error(*this, "expects [fields, dim] embeddings, got " + in[0].to_string());
  f_ = in[0][0], k_ = in[0][1];
  return shape{1};
}

void fm_layer::forward(const forward_context&, std::span<const tensor* const> in, tensor& out) {
  const std::size_t n = in[0]->dim(0);
  sum_.resize(n * k_);
  for (std::size_t b = 0; b < n; ++b) {
    const float* v = in[0]->data() + b * f_ * k_;
    float* s = sum_.data() + b * k_;
    std::fill(s, s + k_, 0.0f);
    float sq = 0;
    for (std::size_t f = 0; f < f_; ++f)
      for (std::size_t k = 0; k < k_; ++k) {
        s[k] += v[f * k_ + k];
        sq += v[f * k_ + k] * v[f * k_ + k];
      }
    float s2 = 0;
    for (std::size_t k = 0; k < k_; ++k) s2 += s[k] * s[k];
    out[b] = 0.5f * (s2 - sq);
  }
}

void fm_layer::backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                        const tensor& grad_out, std::span<tensor* const> grad_in) {
  if (!grad_in[0]) return;
  const std::size_t n = in[0]->dim(0);
  for (std::size_t b = 0; b < n; ++b) {
    const float* v = in[0]->data() + b * f_ * k_;
    const float* s = sum_.data() + b * k_;
    float* dv = grad_in[0]->data() + b * f_ * k_;
    for (std::size_t f = 0; f < f_; ++f)
      for (std::size_t k = 0; k < k_; ++k) dv[f * k_ + k] = grad_out[b] * (s[k] - v[f * k_ + k]);
  }
}

}  // namespace troupe::nn
