// The parameter-free device layers.
#include <cuda_runtime.h>

#include "check.hpp"
#include "device_layers.hpp"
#include "kernels.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::gpu {
namespace {

expected<void> copy_d2d(float* dst, const float* src, std::size_t count, cuda_stream s) {
  return detail::copy_on_device(dst, src, count * sizeof(float), s);
}

class input_dl final : public device_layer {
 public:
  explicit input_dl(std::size_t w) : w_(w) {}
  std::string kind() const override { return "input"; }
  expected<void> forward(const device_context& c, std::span<const float* const>, float* out) override {
    return copy_d2d(out, c.dense_input, c.batch * w_, c.stream);
  }
  expected<void> backward(const device_context&, std::span<const float* const>, const float*, const float*,
                          std::span<float* const>) override {
    return {};
  }

 private:
  std::size_t w_;
};

class relu_dl final : public device_layer {
 public:
  explicit relu_dl(std::size_t w) : w_(w) {}
  std::string kind() const override { return "relu"; }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    return launched(kernels::relu_forward(in[0], out, c.batch * w_, c.stream), "relu_forward");
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float* out,
                          const float* g, std::span<float* const> gin) override {
    if (!gin[0]) return {};
    return launched(kernels::relu_backward(out, g, gin[0], c.batch * w_, c.stream), "relu_backward");
  }

 private:
  std::size_t w_;
};

class sigmoid_dl final : public device_layer {
 public:
  explicit sigmoid_dl(std::size_t w) : w_(w) {}
  std::string kind() const override { return "sigmoid"; }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    return launched(kernels::sigmoid_forward(in[0], out, c.batch * w_, c.stream), "sigmoid_forward");
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float* out,
                          const float* g, std::span<float* const> gin) override {
    if (!gin[0]) return {};
    return launched(kernels::sigmoid_backward(out, g, gin[0], c.batch * w_, c.stream), "sigmoid_backward");
  }

 private:
  std::size_t w_;
};

// Inverted dropout with nn's mask function of (seed, step, element).
class dropout_dl final : public device_layer {
 public:
  dropout_dl(std::size_t w, float rate, std::uint64_t seed) : w_(w), rate_(rate), seed_(seed) {}
  std::string kind() const override { return "dropout"; }
  expected<void> prepare(const device_context& c) override { return reserve(mask_, c.batch * w_); }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    active_ = c.training && rate_ > 0;
    const std::size_t n = c.batch * w_;
    if (!active_) return copy_d2d(out, in[0], n, c.stream);
    const auto threshold = static_cast<std::uint64_t>(static_cast<double>(rate_) * 18446744073709551615.0);
    const std::uint64_t base = nn::mix3(seed_, c.step, 0x0d0d);
    return launched(kernels::dropout_forward(in[0], out, mask_.data(), n, base, threshold,
                                             1.0f / (1.0f - rate_), c.stream),
                    "dropout_forward");
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float*,
                          const float* g, std::span<float* const> gin) override {
    if (!gin[0]) return {};
    const std::size_t n = c.batch * w_;
    if (!active_) return copy_d2d(gin[0], g, n, c.stream);
    return launched(kernels::multiply(g, mask_.data(), gin[0], n, c.stream), "multiply");
  }

 private:
  std::size_t w_;
  float rate_;
  std::uint64_t seed_;
  bool active_ = false;
  device_buffer<float> mask_;
};

class flatten_dl final : public device_layer {
 public:
  explicit flatten_dl(std::size_t w) : w_(w) {}
  std::string kind() const override { return "flatten"; }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    return copy_d2d(out, in[0], c.batch * w_, c.stream);
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float*,
                          const float* g, std::span<float* const> gin) override {
    if (!gin[0]) return {};
    return copy_d2d(gin[0], g, c.batch * w_, c.stream);
  }

 private:
  std::size_t w_;
};

// Row b of the output is the inputs' rows b side by side: one strided 2-D copy per input.
class concat_dl final : public device_layer {
 public:
  explicit concat_dl(std::vector<std::size_t> widths) : widths_(std::move(widths)) {
    for (auto w : widths_) total_ += w;
  }
  std::string kind() const override { return "concat"; }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    std::size_t offset = 0;
    for (std::size_t i = 0; i < in.size(); ++i) {
      TROUPE_GPU_TRY(copy2d(out + offset, total_, in[i], widths_[i], widths_[i], c));
      offset += widths_[i];
    }
    return {};
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float*,
                          const float* g, std::span<float* const> gin) override {
    std::size_t offset = 0;
    for (std::size_t i = 0; i < gin.size(); ++i) {
      if (gin[i]) TROUPE_GPU_TRY(copy2d(gin[i], widths_[i], g + offset, total_, widths_[i], c));
      offset += widths_[i];
    }
    return {};
  }

 private:
  static expected<void> copy2d(float* dst, std::size_t dpitch, const float* src, std::size_t spitch,
                               std::size_t w, const device_context& c) {
    return cuda_check(cudaMemcpy2DAsync(dst, dpitch * sizeof(float), src, spitch * sizeof(float),
                                        w * sizeof(float), c.batch, cudaMemcpyDeviceToDevice, c.stream),
                      "cudaMemcpy2DAsync (concat)");
  }
  std::vector<std::size_t> widths_;
  std::size_t total_ = 0;
};

class add_dl final : public device_layer {
 public:
  explicit add_dl(std::size_t w) : w_(w) {}
  std::string kind() const override { return "add"; }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    const std::size_t n = c.batch * w_;
    TROUPE_GPU_TRY(copy_d2d(out, in[0], n, c.stream));
    for (std::size_t i = 1; i < in.size(); ++i)
      TROUPE_GPU_TRY(launched(kernels::add_into(out, in[i], n, c.stream), "add_into"));
    return {};
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float*,
                          const float* g, std::span<float* const> gin) override {
    for (float* d : gin)
      if (d) TROUPE_GPU_TRY(copy_d2d(d, g, c.batch * w_, c.stream));
    return {};
  }

 private:
  std::size_t w_;
};

class sum_dl final : public device_layer {
 public:
  explicit sum_dl(std::size_t w) : w_(w) {}
  std::string kind() const override { return "sum"; }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    return launched(kernels::row_sum(in[0], out, c.batch, w_, c.stream), "row_sum");
  }
  expected<void> backward(const device_context& c, std::span<const float* const>, const float*,
                          const float* g, std::span<float* const> gin) override {
    if (!gin[0]) return {};
    return launched(kernels::row_broadcast(g, gin[0], c.batch, w_, c.stream), "row_broadcast");
  }

 private:
  std::size_t w_;
};

class fm_dl final : public device_layer {
 public:
  fm_dl(std::size_t f, std::size_t k) : f_(f), k_(k) {}
  std::string kind() const override { return "fm"; }
  expected<void> prepare(const device_context& c) override { return reserve(sum_, c.batch * k_); }
  expected<void> forward(const device_context& c, std::span<const float* const> in, float* out) override {
    return launched(kernels::fm_forward(in[0], out, sum_.data(), c.batch, f_, k_, c.stream), "fm_forward");
  }
  expected<void> backward(const device_context& c, std::span<const float* const> in, const float*,
                          const float* g, std::span<float* const> gin) override {
    if (!gin[0]) return {};
    return launched(kernels::fm_backward(in[0], sum_.data(), g, gin[0], c.batch, f_, k_, c.stream),
                    "fm_backward");
  }

 private:
  std::size_t f_, k_;
  device_buffer<float> sum_;
};

}  // namespace

std::unique_ptr<device_layer> make_input(std::size_t w) {
  return std::make_unique<input_dl>(w);
}
std::unique_ptr<device_layer> make_relu(std::size_t w) {
  return std::make_unique<relu_dl>(w);
}
std::unique_ptr<device_layer> make_sigmoid(std::size_t w) {
  return std::make_unique<sigmoid_dl>(w);
}
std::unique_ptr<device_layer> make_dropout(std::size_t w, float rate, std::uint64_t seed) {
  return std::make_unique<dropout_dl>(w, rate, seed);
}
std::unique_ptr<device_layer> make_flatten(std::size_t w) {
  return std::make_unique<flatten_dl>(w);
}
std::unique_ptr<device_layer> make_concat(std::vector<std::size_t> widths) {
  return std::make_unique<concat_dl>(std::move(widths));
}
std::unique_ptr<device_layer> make_add(std::size_t w, std::size_t) {
  return std::make_unique<add_dl>(w);
}
std::unique_ptr<device_layer> make_sum(std::size_t w) {
  return std::make_unique<sum_dl>(w);
}
std::unique_ptr<device_layer> make_fm(std::size_t f, std::size_t k) {
  return std::make_unique<fm_dl>(f, k);
}

}  // namespace troupe::gpu
