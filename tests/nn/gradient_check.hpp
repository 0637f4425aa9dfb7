// Numerical gradient checking for layers: L = sum(out * R) for a fixed random R, central
// differences on (a sample of) every input element and every parameter element.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "troupe/nn/embedding_table.hpp"
#include "troupe/nn/layer.hpp"
#include "troupe/nn/random.hpp"

namespace troupe::nn::testing {

struct check_options {
  std::size_t batch = 3;
  bool training = true;
  const nn::batch* input = nullptr;  // for source layers
  float eps = 1e-2f;
  double atol = 2e-3, rtol = 2e-2;
  bool distinct_inputs = false;  // well-separated values (max pool: no near-ties)
  std::size_t max_checks = 60;   // elements checked per tensor
};

inline void fill_inputs(tensor& t, rng& r, bool distinct) {
  if (distinct) {
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = 0.05f * static_cast<float>(i) - 1.0f;
    for (std::size_t i = t.size(); i > 1; --i) std::swap(t[i - 1], t[r.below(i)]);
    return;
  }
  // Magnitudes in [0.2, 1]: away from the ReLU kink at 0.
  for (auto& v : t) v = (r.uniform() < 0.5 ? -1.0f : 1.0f) * (0.2f + 0.8f * r.uniform_f());
}

class gradient_checker {
 public:
  gradient_checker(layer& l, std::vector<shape> in_shapes, check_options o) : l_(l), o_(o), r_(42) {
    l_.set_name("l");
    auto s = l_.infer(in_shapes, 7);
    EXPECT_TRUE(s) << s.err().to_string();
    if (!s) return;
    for (const auto& is : in_shapes) {
      inputs_.emplace_back(is.batched(o_.batch));
      fill_inputs(inputs_.back(), r_, o_.distinct_inputs);
      grads_.emplace_back(is.batched(o_.batch));
    }
    out_.resize(s->batched(o_.batch));
    weights_.resize(out_.dims());
    for (auto& v : weights_) v = static_cast<float>(r_.normal());
    ok_ = true;
  }

  double loss() {
    forward_context ctx{o_.input, o_.training, 5};
    std::vector<const tensor*> in;
    for (auto& t : inputs_) in.push_back(&t);
    l_.forward(ctx, in, out_);
    double s = 0;
    for (std::size_t i = 0; i < out_.size(); ++i) s += static_cast<double>(out_[i]) * weights_[i];
    return s;
  }

  void analytic() {
    loss();
    forward_context ctx{o_.input, o_.training, 5};
    std::vector<const tensor*> in;
    std::vector<tensor*> gin;
    for (std::size_t i = 0; i < inputs_.size(); ++i) in.push_back(&inputs_[i]), gin.push_back(&grads_[i]);
    l_.backward(ctx, in, out_, weights_, gin);
  }

  double numeric(float* x) {
    const float saved = *x;
    *x = saved + o_.eps;
    const double plus = loss();
    *x = saved - o_.eps;
    const double minus = loss();
    *x = saved;
    return (plus - minus) / (2.0 * o_.eps);
  }

  void expect_close(double num, double ana, const std::string& what) {
    EXPECT_LE(std::abs(num - ana), o_.atol + o_.rtol * std::abs(num))
        << what << ": numeric " << num << " analytic " << ana;
  }

  // Checks inputs and dense parameters; returns the number of elements compared.
  std::size_t run() {
    if (!ok_) return 0;
    analytic();
    std::size_t checked = 0;
    for (std::size_t t = 0; t < inputs_.size(); ++t)
      for (std::size_t i : sample(inputs_[t].size())) {
        expect_close(numeric(&inputs_[t][i]), grads_[t][i],
                     "input " + std::to_string(t) + "[" + std::to_string(i) + "]");
        ++checked;
      }
    for (dense_param* p : l_.params()) {
      if (!p->trainable) continue;
      tensor g = p->grad;  // copy: numeric() runs forward again
      for (std::size_t i : sample(p->value.size())) {
        expect_close(numeric(&p->value[i]), g[i], p->name + "[" + std::to_string(i) + "]");
        ++checked;
      }
    }
    if (embedding_table* table = l_.table()) {
      sparse_grad g = table->grad();
      for (std::size_t r = 0; r < g.size(); ++r)
        for (std::size_t k = 0; k < g.dim; ++k) {
          expect_close(numeric(table->row(g.ids[r]) + k), g.row(r)[k], "row " + std::to_string(g.ids[r]));
          ++checked;
        }
    }
    return checked;
  }

 private:
  std::vector<std::size_t> sample(std::size_t n) {
    std::vector<std::size_t> idx;
    if (n <= o_.max_checks) {
      for (std::size_t i = 0; i < n; ++i) idx.push_back(i);
    } else {
      for (std::size_t i = 0; i < o_.max_checks; ++i) idx.push_back(r_.below(n));
    }
    return idx;
  }

  layer& l_;
  check_options o_;
  rng r_;
  bool ok_ = false;
  std::vector<tensor> inputs_, grads_;
  tensor out_, weights_;
};

}  // namespace troupe::nn::testing
