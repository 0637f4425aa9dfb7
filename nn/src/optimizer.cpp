#include "troupe/nn/optimizer.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "troupe/nn/errc.hpp"

namespace troupe::nn {
namespace {

// The square-root kernels, one clone per instruction set (the loader picks the widest this CPU
// has). This file is built with -fno-math-errno (so that sqrt vectorizes: it never sees a negative
// here) and -ffp-contract=off (no fused multiply-adds): every clone computes each element with the
// same IEEE operations in the same order, so all give the bits of the scalar loop.
#define TROUPE_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

TROUPE_SIMD_CLONES void adagrad_kernel(float* __restrict w, const float* __restrict g, float* __restrict acc,
                                       std::size_t n, float lr, float wd, float eps) {
  for (std::size_t i = 0; i < n; ++i) {
    float gi = g[i] + wd * w[i];
    acc[i] += gi * gi;
    w[i] -= lr * gi / (std::sqrt(acc[i]) + eps);
  }
}

TROUPE_SIMD_CLONES void adam_kernel(float* __restrict w, const float* __restrict g, float* __restrict m,
                                    float* __restrict v, std::size_t n, float lr_t, float b1, float b2,
                                    float wd, float eps) {
  for (std::size_t i = 0; i < n; ++i) {
    float gi = g[i] + wd * w[i];
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    w[i] -= lr_t * m[i] / (std::sqrt(v[i]) + eps);
  }
}

class sgd final : public optimizer {
 public:
  sgd(const optimizer_config& c)
      : momentum_(static_cast<float>(c.momentum)),
        nesterov_(c.nesterov),
        wd_(static_cast<float>(c.weight_decay)) {
    lr_ = c.learning_rate;
  }
  const char* name() const override { return "sgd"; }
  std::size_t slots_per_element() const override { return momentum_ > 0 ? 1 : 0; }
  void update(float* __restrict w, const float* __restrict g, float* __restrict s, std::size_t n,
              std::uint64_t& step) const override {
    const float lr = static_cast<float>(lr_), m = momentum_, wd = wd_;
    if (m == 0) {
      for (std::size_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    } else if (!nesterov_) {
      for (std::size_t i = 0; i < n; ++i) {
        s[i] = m * s[i] + g[i] + wd * w[i];
        w[i] -= lr * s[i];
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        float gi = g[i] + wd * w[i];
        s[i] = m * s[i] + gi;
        w[i] -= lr * (gi + m * s[i]);
      }
    }
    ++step;
  }

 private:
  float momentum_;
  bool nesterov_;
  float wd_;
};

class adagrad final : public optimizer {
 public:
  adagrad(const optimizer_config& c)
      : init_(static_cast<float>(c.initial_accumulator)),
        eps_(static_cast<float>(c.epsilon)),
        wd_(static_cast<float>(c.weight_decay)) {
    lr_ = c.learning_rate;
  }
  const char* name() const override { return "adagrad"; }
  std::size_t slots_per_element() const override { return 1; }
  float slot_init() const override { return init_; }
  void update(float* __restrict w, const float* __restrict g, float* __restrict acc, std::size_t n,
              std::uint64_t& step) const override {
    adagrad_kernel(w, g, acc, n, static_cast<float>(lr_), wd_, eps_);
    ++step;
  }

 private:
  float init_, eps_, wd_;
};

class adam final : public optimizer {
 public:
  adam(const optimizer_config& c)
      : b1_(c.beta1),
        b2_(c.beta2),
        eps_(static_cast<float>(c.epsilon)),
        wd_(static_cast<float>(c.weight_decay)) {
    lr_ = c.learning_rate;
    for (std::size_t t = 1; t < kCached; ++t) correction_[t] = correction(static_cast<double>(t));
  }
  const char* name() const override { return "adam"; }
  std::size_t slots_per_element() const override { return 2; }
  void update(float* __restrict w, const float* __restrict g, float* __restrict s, std::size_t n,
              std::uint64_t& step) const override {
    ++step;
    // Bias-corrected step size, as in Kingma & Ba (and TF's Adam: epsilon outside the sqrt). The
    // correction of the first kCached steps is computed once: a PS shard updates each row with its
    // own step count (lazy Adam), so it would otherwise pay a pow pair per row.
    const auto [num, den] = step < kCached ? correction_[step] : correction(static_cast<double>(step));
    const float lr_t = static_cast<float>(lr_ * num / den);
    const float b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_);
    adam_kernel(w, g, s, s + n, n, lr_t, b1, b2, wd_, eps_);
  }

 private:
  // sqrt(1 - b2^t) and 1 - b1^t: lr_t = lr * first / second (the same operations in the same order
  // whether cached or not, so that both give the same bits; lr may change between steps).
  std::pair<double, double> correction(double t) const {
    return {std::sqrt(1 - std::pow(b2_, t)), 1 - std::pow(b1_, t)};
  }
  static constexpr std::uint64_t kCached = 1024;
  double b1_, b2_;
  float eps_, wd_;
  std::array<std::pair<double, double>, kCached> correction_{};
};

}  // namespace

expected<std::unique_ptr<optimizer>> make_optimizer(const optimizer_config& c) {
  auto bad = [&](const std::string& why) {
    return make_unexpected(nn_errc::bad_config, "optimizer '" + c.type + "': " + why);
  };
  if (!(c.learning_rate > 0)) return bad("learning_rate must be > 0");
  if (c.weight_decay < 0) return bad("weight_decay must be >= 0");
  if (c.type == "sgd") {
    if (c.momentum < 0 || c.momentum >= 1) return bad("momentum must be in [0, 1)");
    return std::unique_ptr<optimizer>(std::make_unique<sgd>(c));
  }
  if (!(c.epsilon > 0)) return bad("epsilon must be > 0");
  if (c.type == "adagrad") {
    if (c.initial_accumulator < 0) return bad("initial_accumulator must be >= 0");
    return std::unique_ptr<optimizer>(std::make_unique<adagrad>(c));
  }
  if (c.type == "adam") {
    if (c.beta1 < 0 || c.beta1 >= 1 || c.beta2 < 0 || c.beta2 >= 1)
      return bad("beta1 and beta2 must be in [0, 1)");
    return std::unique_ptr<optimizer>(std::make_unique<adam>(c));
  }
  return make_unexpected(nn_errc::unknown_name, "optimizer '" + c.type + "': expected sgd, adagrad or adam");
}

void apply_dense(const optimizer& opt, tensor& value, const tensor& grad, dense_slots& slots) {
  const std::size_t need = opt.slots_per_element() * value.size();
  if (slots.values.size() != need) slots.values.assign(need, opt.slot_init());
  opt.update(value.data(), grad.data(), slots.values.data(), value.size(), slots.step);
}

row_slots::row_slots(std::size_t dim, const optimizer& opt)
    : rows_(dim * opt.slots_per_element(), opt.slot_init()) {}

float* row_slots::get(std::uint64_t id, std::uint64_t** step, std::uint32_t* slot) {
  bool created = false;
  const std::uint32_t i = rows_.insert(id, created);
  if (slot) *slot = i;
  if (created && (i >> row_store::kSlabShift) == steps_.size())
    steps_.push_back(
        static_cast<std::uint64_t*>(steps_arena_.allocate(row_store::kSlabRows * sizeof(std::uint64_t))));
  *step = this->step(i);
  if (created) **step = 0;
  return rows_.row(i);
}

bool row_slots::read(std::uint64_t id, float* out, std::uint64_t& step) const {
  const std::uint32_t i = rows_.find(id);
  if (i == row_store::npos) return false;
  std::memcpy(out, rows_.row(i), rows_.width() * sizeof(float));
  step = *this->step(i);
  return true;
}

void row_slots::write(std::uint64_t id, const float* in, std::uint64_t step) {
  std::uint64_t* s = nullptr;
  float* dst = get(id, &s);
  std::memcpy(dst, in, rows_.width() * sizeof(float));
  *s = step;
}

// In batches of kBatch rows, so that the index entries and rows of a batch are loaded in parallel
// (the rows of random ids are cache misses): the index entries of the next batch are prefetched
// while this batch's rows are found (and prefetched), then this batch is updated.
void apply_sparse(const optimizer& opt, embedding_table& table, std::span<const std::uint64_t> ids,
                  const float* rows, row_slots& slots, slot_set* updated) {
  constexpr std::size_t kBatch = 32;
  const std::size_t dim = table.dim(), width = slots.width();
  float* w[kBatch];
  float* s[kBatch];
  std::uint64_t* step[kBatch];
  std::uint32_t slot[kBatch];
  for (std::size_t base = 0; base < ids.size(); base += kBatch) {
    const std::size_t n = std::min(kBatch, ids.size() - base);
    for (std::size_t j = base + kBatch; j < std::min(base + 2 * kBatch, ids.size()); ++j) {
      table.prefetch(ids[j]);
      slots.prefetch(ids[j]);
    }
    for (std::size_t j = 0; j < n; ++j) {
      w[j] = table.row(ids[base + j]);
      s[j] = slots.get(ids[base + j], &step[j], &slot[j]);
      __builtin_prefetch(w[j], 1);
      __builtin_prefetch(w[j] + dim - 1, 1);
      __builtin_prefetch(s[j], 1);
      __builtin_prefetch(s[j] + width / 2, 1);
      __builtin_prefetch(s[j] + (width > 0 ? width - 1 : 0), 1);
      __builtin_prefetch(step[j], 1);
    }
    for (std::size_t j = 0; j < n; ++j) opt.update(w[j], rows + (base + j) * dim, s[j], dim, *step[j]);
    if (updated)
      for (std::size_t j = 0; j < n; ++j) updated->insert(slot[j]);
  }
}

void apply_sparse(const optimizer& opt, embedding_table& table, const sparse_grad& grad, row_slots& slots) {
  apply_sparse(opt, table, grad.ids, grad.rows.data(), slots);
}

}  // namespace troupe::nn
