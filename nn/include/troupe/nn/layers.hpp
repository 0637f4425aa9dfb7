// The built-in layers. Shapes below are per example (the batch dimension is implicit).
// Registry names (for layer_registry::create and the "sequential" model) in brackets.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "troupe/nn/embedding_table.hpp"
#include "troupe/nn/layer.hpp"
#include "troupe/nn/sparse_batch.hpp"

namespace troupe::nn {

// [dense:units] y = x W + b; x of any shape is read as a vector. W [in, units] Glorot-uniform.
class dense_layer final : public layer {
 public:
  explicit dense_layer(std::size_t units) : units_(units) {}
  std::string kind() const override { return "dense"; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t seed) override;
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const> in, const tensor& out,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;
  std::vector<dense_param*> params() override { return {&weight_, &bias_}; }
  std::size_t units() const { return units_; }
  std::size_t inputs() const { return in_; }  // after infer()

 private:
  std::size_t units_, in_ = 0;
  dense_param weight_, bias_;
};

// [relu] [sigmoid]
class relu_layer final : public layer {
 public:
  std::string kind() const override { return "relu"; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override { return in[0]; }
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const>, const tensor& out,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;
};

class sigmoid_layer final : public layer {
 public:
  std::string kind() const override { return "sigmoid"; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override { return in[0]; }
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const>, const tensor& out,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;
};

// [dropout:rate] Inverted dropout; the mask is a pure function of (seed, step, element).
class dropout_layer final : public layer {
 public:
  explicit dropout_layer(float rate) : rate_(rate) {}
  std::string kind() const override { return "dropout"; }
  float rate() const { return rate_; }
  std::uint64_t seed() const { return seed_; }  // after infer(); masks derive from it
  expected<shape> infer(std::span<const shape> in, std::uint64_t seed) override;
  void forward(const forward_context& ctx, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context& ctx, std::span<const tensor* const>, const tensor&,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;

 private:
  float rate_;
  std::uint64_t seed_ = 0;
  bool active_ = false;
  std::vector<float> mask_;
};

// [flatten] any shape -> [size]
class flatten_layer final : public layer {
 public:
  std::string kind() const override { return "flatten"; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override;
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const>, const tensor&, const tensor& grad_out,
                std::span<tensor* const> grad_in) override;
};

// [conv2d:filters,kernel,padding] [C,H,W] -> [filters, H-k+1+2p, W-k+1+2p], stride 1,
// im2col + one sgemm per chunk of at most `chunk` examples, fewer where the im2col buffer would
// outgrow ~2 MiB (bounds the buffers, and keeps them in cache).
class conv2d_layer final : public layer {
 public:
  conv2d_layer(std::size_t filters, std::size_t kernel, std::size_t padding = 0, std::size_t chunk = 32)
      : filters_(filters), k_(kernel), pad_(padding), chunk_(chunk ? chunk : 1) {}
  std::string kind() const override { return "conv2d"; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t seed) override;
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const> in, const tensor& out,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;
  std::vector<dense_param*> params() override { return {&weight_, &bias_}; }
  std::size_t filters() const { return filters_; }
  std::size_t kernel() const { return k_; }
  std::size_t padding() const { return pad_; }

 private:
  void im2col(const float* x, float* col, std::size_t ld) const;
  void col2im(const float* col, std::size_t ld, float* x) const;
  std::size_t examples_per_chunk() const;
  std::size_t filters_, k_, pad_, chunk_;
  std::size_t c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;
  dense_param weight_, bias_;  // weight [filters, C*k*k]
  std::vector<float> col_, dcol_, y_;
};

// [maxpool2d:pool] [C,H,W] -> [C, H/pool, W/pool] (floor), stride = pool.
class maxpool2d_layer final : public layer {
 public:
  explicit maxpool2d_layer(std::size_t pool) : pool_(pool) {}
  std::string kind() const override { return "maxpool2d"; }
  std::size_t pool() const { return pool_; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override;
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const>, const tensor&, const tensor& grad_out,
                std::span<tensor* const> grad_in) override;

 private:
  std::size_t pool_, c_ = 0, h_ = 0, w_ = 0, oh_ = 0, ow_ = 0;
  std::vector<std::uint32_t> argmax_;
};

// [batchnorm:momentum,epsilon] Normalises each channel (dim 0 of [C,H,W], or each feature of
// [F]) over batch and space; running statistics (state, not trained) are used in evaluation.
class batch_norm_layer final : public layer {
 public:
  explicit batch_norm_layer(float momentum = 0.99f, float epsilon = 1e-3f)
      : momentum_(momentum), eps_(epsilon) {}
  std::string kind() const override { return "batchnorm"; }
  float epsilon() const { return eps_; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t seed) override;
  void forward(const forward_context& ctx, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context& ctx, std::span<const tensor* const>, const tensor&,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;
  std::vector<dense_param*> params() override { return {&gamma_, &beta_, &running_mean_, &running_var_}; }

 private:
  float momentum_, eps_;
  std::size_t c_ = 0, spatial_ = 1;
  dense_param gamma_, beta_, running_mean_, running_var_;
  std::vector<float> xhat_, inv_std_;
};

// [embedding:dim,scale,first_field,fields] A source layer: looks up the ids of `fields` fields
// (default: all) of the batch -> [fields, dim]. Owns the table "<name>"; rows are
// N(0, scale) (scale 0: zeros). Backward leaves the combined sparse gradient in table().grad().
class embedding_layer final : public layer {
 public:
  embedding_layer(std::size_t dim, float scale, std::size_t first_field = 0, std::size_t fields = 0)
      : dim_(dim), scale_(scale), first_(first_field), fields_(fields) {}
  std::string kind() const override { return "embedding"; }
  int arity() const override { return 0; }
  // Needs the dataset's number of fields: set by the model before infer (0 means "all").
  void set_available_fields(std::size_t n) { available_ = n; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t seed) override;
  void forward(const forward_context& ctx, std::span<const tensor* const>, tensor& out) override;
  void backward(const forward_context& ctx, std::span<const tensor* const>, const tensor&,
                const tensor& grad_out, std::span<tensor* const>) override;
  embedding_table* table() override { return table_.get(); }
  // Appends the ids this layer looks up for `b` (with repeats).
  void collect_ids(const batch& b, std::vector<std::uint64_t>& out) const;
  std::size_t dim() const { return dim_; }
  std::size_t first_field() const { return first_; }
  std::size_t fields() const { return fields_; }  // after infer()

 private:
  std::size_t dim_;
  float scale_;
  std::size_t first_, fields_, available_ = 0;
  void take_ids(const batch& b);
  std::unique_ptr<embedding_table> table_;
  std::vector<std::uint64_t> ids_;
  sparse_batch rows_;           // the last forward's rows, for its backward's combine
  std::vector<float> scratch_;  // rows gathered again when the backward's batch is another
};

// [input] A source layer copying the batch's dense features, shaped like the dataset's image
// ([C,H,W]) or [dense_dim].
class input_layer final : public layer {
 public:
  explicit input_layer(shape s) : shape_(s) {}
  std::string kind() const override { return "input"; }
  int arity() const override { return 0; }
  expected<shape> infer(std::span<const shape>, std::uint64_t) override;
  void forward(const forward_context& ctx, std::span<const tensor* const>, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const>, const tensor&, const tensor&,
                std::span<tensor* const>) override {}

 private:
  shape shape_;
};

// [fm] Factorisation-machine second-order term: [F, k] -> [1],
// 0.5 * sum_k ((sum_f v_fk)^2 - sum_f v_fk^2).
class fm_layer final : public layer {
 public:
  std::string kind() const override { return "fm"; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override;
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;

 private:
  std::size_t f_ = 0, k_ = 0;
  std::vector<float> sum_;
};

// [concat] inputs of any shapes -> [sum of their sizes] (each read as a vector).
class concat_layer final : public layer {
 public:
  std::string kind() const override { return "concat"; }
  int arity() const override { return -1; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override;
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;
};

// [add] inputs of one shape -> their element-wise sum.
class add_layer final : public layer {
 public:
  std::string kind() const override { return "add"; }
  int arity() const override { return -1; }
  expected<shape> infer(std::span<const shape> in, std::uint64_t) override;
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const>, const tensor&, const tensor& grad_out,
                std::span<tensor* const> grad_in) override;
};

// [sum] any shape -> [1], the sum of the example's elements (the wide/linear part of CTR models).
class sum_layer final : public layer {
 public:
  std::string kind() const override { return "sum"; }
  expected<shape> infer(std::span<const shape>, std::uint64_t) override { return shape{1}; }
  void forward(const forward_context&, std::span<const tensor* const> in, tensor& out) override;
  void backward(const forward_context&, std::span<const tensor* const> in, const tensor&,
                const tensor& grad_out, std::span<tensor* const> grad_in) override;
};

}  // namespace troupe::nn
