// Dense on cuBLAS: y = x W + b with W [in, units] row-major, as nn::dense_layer.
#include "blas.hpp"
#include "check.hpp"
#include "device_layers.hpp"
#include "kernels.hpp"

namespace troupe::gpu {
namespace {

class dense_dl final : public device_layer {
 public:
  dense_dl(std::size_t in, std::size_t units) : in_(in), units_(units) {}
  std::string kind() const override { return "dense"; }
  void bind(std::span<float* const> v, std::span<float* const> g) override {
    w_ = v[0], b_ = v[1], dw_ = g[0], db_ = g[1];
  }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    TROUPE_GPU_TRY(gemm_rm(c.blas, false, false, c.batch, units_, in_, in[0], w_, 0.0f, out));
    return launched(kernels::bias_add(out, b_, c.batch, units_, c.stream), "bias_add");
  }
  // dW = x^T dy; db = column sums of dy; dx = dy W^T.
  expected<void> backward(const device_context& c, std::span<const float* const> in, const float*,
                          const float* g, std::span<float* const> gin) override {
    TROUPE_GPU_TRY(gemm_rm(c.blas, true, false, in_, units_, c.batch, in[0], g, 0.0f, dw_));
    TROUPE_GPU_TRY(launched(kernels::bias_grad(g, db_, c.batch, units_, c.stream), "bias_grad"));
    if (!gin[0]) return {};
    return gemm_rm(c.blas, false, true, c.batch, in_, units_, g, w_, 0.0f, gin[0]);
  }

 private:
  std::size_t in_, units_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

unexpected unsupported(const nn::layer& l) {
  return make_unexpected(gpu_errc::unsupported,
                         "layer '" + l.name() + "' (" + l.kind() + ") has no GPU implementation");
}

}  // namespace

std::unique_ptr<device_layer> make_dense(std::size_t in, std::size_t units) {
  return std::make_unique<dense_dl>(in, units);
}

expected<std::unique_ptr<device_layer>> make_device_layer(nn::layer& l, std::span<const nn::shape> in,
                                                          const nn::shape& out) {
  const std::string k = l.kind();
  const std::size_t w = out.size();
  if (k == "input") return make_input(w);
  if (k == "dense") {
    auto& d = static_cast<nn::dense_layer&>(l);
    return make_dense(d.inputs(), d.units());
  }
  if (k == "relu") return make_relu(w);
  if (k == "sigmoid") return make_sigmoid(w);
  if (k == "dropout") {
    auto& d = static_cast<nn::dropout_layer&>(l);
    return make_dropout(w, d.rate(), d.seed());
  }
  if (k == "flatten") return make_flatten(w);
  if (k == "concat") {
    std::vector<std::size_t> widths;
    for (const auto& s : in) widths.push_back(s.size());
    return make_concat(std::move(widths));
  }
  if (k == "add") return make_add(w, in.size());
  if (k == "sum") return make_sum(in.empty() ? 0 : in[0].size());
  if (k == "fm") {
    if (in.size() != 1 || in[0].rank() != 2) return unsupported(l);
    return make_fm(in[0][0], in[0][1]);
  }
  if (k == "embedding") return make_embedding(static_cast<nn::embedding_layer&>(l));
  return unsupported(l);
}

expected<void> device_layer::download_sparse_grad(nn::sparse_grad&, cuda_stream) {
  return make_unexpected(gpu_errc::unsupported, "layer '" + kind() + "' has no sparse gradient");
}

}  // namespace troupe::gpu
