// Device losses and optimizers.
#include "check.hpp"
#include "kernels.hpp"
#include "troupe/gpu/layers.hpp"
#include "troupe/nn/errc.hpp"

namespace troupe::gpu {

expected<void> loss_forward(nn::loss_kind kind, const float* logits, const float* labels, std::size_t n,
                            std::size_t width, float* probs, float* example_loss, float* mean_loss,
                            cuda_stream s) {
  if (kind == nn::loss_kind::sigmoid_bce) {
    TROUPE_GPU_TRY(launched(kernels::bce_forward(logits, labels, probs, example_loss, n, s), "bce_forward"));
  } else {
    TROUPE_GPU_TRY(launched(kernels::softmax_ce_forward(logits, labels, probs, example_loss, n, width, s),
                            "softmax_ce_forward"));
  }
  return launched(kernels::mean(example_loss, mean_loss, n, s), "mean");
}

expected<void> loss_backward(nn::loss_kind kind, const float* probs, const float* labels, std::size_t n,
                             std::size_t width, float* grad_logits, cuda_stream s) {
  if (kind == nn::loss_kind::sigmoid_bce)
    return launched(kernels::bce_backward(probs, labels, grad_logits, n, s), "bce_backward");
  return launched(kernels::softmax_ce_backward(probs, labels, grad_logits, n, width, s),
                  "softmax_ce_backward");
}

namespace {

class sgd_opt final : public device_optimizer {
 public:
  explicit sgd_opt(const nn::optimizer_config& c)
      : p_{static_cast<float>(c.learning_rate), static_cast<float>(c.momentum),
           static_cast<float>(c.weight_decay), c.nesterov} {}
  std::size_t slots_per_element() const override { return p_.momentum > 0 ? 1 : 0; }
  float slot_init() const override { return 0.0f; }
  expected<void> update_dense(float* w, const float* g, float* slots, std::size_t n, std::uint64_t& step,
                              cuda_stream s) const override {
    ++step;
    return launched(kernels::sgd_dense(w, g, slots, n, p(), s), "sgd_dense");
  }
  expected<void> update_rows(float* table, float* slots, std::uint32_t* steps, const std::int32_t* rows,
                             const float* grad, std::size_t count, std::size_t dim,
                             cuda_stream s) const override {
    TROUPE_GPU_TRY(launched(kernels::increment_steps(steps, rows, count, s), "increment_steps"));
    return launched(kernels::sgd_rows(table, slots, rows, grad, count, dim, p(), s), "sgd_rows");
  }

 private:
  kernels::sgd_params p_;
  kernels::sgd_params p() const {
    return {static_cast<float>(p_.lr * lr_scale_), p_.momentum, p_.weight_decay, p_.nesterov};
  }
};

class adagrad_opt final : public device_optimizer {
 public:
  explicit adagrad_opt(const nn::optimizer_config& c)
      : init_(static_cast<float>(c.initial_accumulator)),
        p_{static_cast<float>(c.learning_rate), static_cast<float>(c.epsilon),
           static_cast<float>(c.weight_decay)} {}
  std::size_t slots_per_element() const override { return 1; }
  float slot_init() const override { return init_; }
  expected<void> update_dense(float* w, const float* g, float* slots, std::size_t n, std::uint64_t& step,
                              cuda_stream s) const override {
    ++step;
    return launched(kernels::adagrad_dense(w, g, slots, n, p(), s), "adagrad_dense");
  }
  expected<void> update_rows(float* table, float* slots, std::uint32_t* steps, const std::int32_t* rows,
                             const float* grad, std::size_t count, std::size_t dim,
                             cuda_stream s) const override {
    TROUPE_GPU_TRY(launched(kernels::increment_steps(steps, rows, count, s), "increment_steps"));
    return launched(kernels::adagrad_rows(table, slots, rows, grad, count, dim, p(), s), "adagrad_rows");
  }

 private:
  float init_;
  kernels::adagrad_params p_;
  kernels::adagrad_params p() const {
    return {static_cast<float>(p_.lr * lr_scale_), p_.epsilon, p_.weight_decay};
  }
};

class adam_opt final : public device_optimizer {
 public:
  explicit adam_opt(const nn::optimizer_config& c)
      : p_{c.learning_rate, c.beta1, c.beta2, static_cast<float>(c.epsilon),
           static_cast<float>(c.weight_decay)} {}
  std::size_t slots_per_element() const override { return 2; }
  float slot_init() const override { return 0.0f; }
  expected<void> update_dense(float* w, const float* g, float* slots, std::size_t n, std::uint64_t& step,
                              cuda_stream s) const override {
    ++step;
    return launched(kernels::adam_dense(w, g, slots, n, step, p(), s), "adam_dense");
  }
  expected<void> update_rows(float* table, float* slots, std::uint32_t* steps, const std::int32_t* rows,
                             const float* grad, std::size_t count, std::size_t dim,
                             cuda_stream s) const override {
    TROUPE_GPU_TRY(launched(kernels::increment_steps(steps, rows, count, s), "increment_steps"));
    return launched(kernels::adam_rows(table, slots, steps, rows, grad, count, dim, p(), s), "adam_rows");
  }

 private:
  kernels::adam_params p_;
  kernels::adam_params p() const {
    return {p_.lr * lr_scale_, p_.beta1, p_.beta2, p_.epsilon, p_.weight_decay};
  }
};

}  // namespace

expected<std::unique_ptr<device_optimizer>> device_optimizer::create(const nn::optimizer_config& c) {
  // nn validates the configuration; its errors are the ones users know.
  auto host = nn::make_optimizer(c);
  if (!host) return std::move(host).err();
  if (c.type == "sgd") return std::unique_ptr<device_optimizer>(std::make_unique<sgd_opt>(c));
  if (c.type == "adagrad") return std::unique_ptr<device_optimizer>(std::make_unique<adagrad_opt>(c));
  return std::unique_ptr<device_optimizer>(std::make_unique<adam_opt>(c));
}

}  // namespace troupe::gpu
