#include "grad_norms.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace troupe::actors::goodput {

namespace {
// The kernels below run once per step over every gradient element, beside the loops the strategy
// needs anyway: they must vectorise. Sums go into `lanes` independent float accumulators (without
// -ffast-math a single accumulator is a chain of dependent scalar adds), the pointers are
// __restrict (the stores into the buffer must not be assumed to alias the gradient) and each kernel
// is compiled for AVX-512, AVX2 and the baseline, picked at load time (as nn's optimizer kernels;
// actors/CMakeLists.txt compiles this file without errno and fused multiply-adds, so that the sqrt
// vectorises and every clone gives the same bits).
#define TROUPE_GOODPUT_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
constexpr std::size_t lanes = 16;
constexpr std::size_t block = 4096;  // float sums over at most this many elements, blocks in double

float lane_total(const float* acc) {
  float s = 0;
  for (std::size_t j = 0; j < lanes; ++j) s += acc[j];
  return s;
}

// o = p k (add: o += p k); returns sum p^2 w (w null: 1). n <= block.
TROUPE_GOODPUT_SIMD_CLONES float weigh_block(float* __restrict o, const float* __restrict p,
                                             const float* __restrict w, std::size_t n, float k, bool add) {
  float acc[lanes] = {};
  std::size_t i = 0;
  const std::size_t whole = n - n % lanes;
  if (!add && !w) {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = p[i + j];
        o[i + j] = x * k;
        acc[j] += x * x;
      }
  } else if (!add) {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = p[i + j];
        o[i + j] = x * k;
        acc[j] += x * x * w[i + j];
      }
  } else if (!w) {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = p[i + j];
        o[i + j] += x * k;
        acc[j] += x * x;
      }
  } else {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = p[i + j];
        o[i + j] += x * k;
        acc[j] += x * x * w[i + j];
      }
  }
  for (; i < n; ++i) {
    const float x = p[i];
    o[i] = add ? o[i] + x * k : x * k;
    acc[0] += w ? x * x * w[i] : x * x;
  }
  return lane_total(acc);
}

// g = b / k (a division, as the plain loop: the averages are the same with the estimate on or off); returns
// sum g^2 w (w null: 1). n <= block.
TROUPE_GOODPUT_SIMD_CLONES float average_block(float* __restrict g, const float* __restrict b,
                                               const float* __restrict w, std::size_t n, float k) {
  float acc[lanes] = {};
  std::size_t i = 0;
  const std::size_t whole = n - n % lanes;
  if (!w) {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = b[i + j] / k;
        g[i + j] = x;
        acc[j] += x * x;
      }
  } else {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = b[i + j] / k;
        g[i + j] = x;
        acc[j] += x * x * w[i + j];
      }
  }
  for (; i < n; ++i) {
    g[i] = b[i] / k;
    acc[0] += w ? g[i] * g[i] * w[i] : g[i] * g[i];
  }
  return lane_total(acc);
}

// Returns sum ((p + o) / 2)^2 w (w null: 1), then o = p. n <= block.
TROUPE_GOODPUT_SIMD_CLONES float pair_block(const float* __restrict p, float* __restrict o,
                                            const float* __restrict w, std::size_t n) {
  float acc[lanes] = {};
  std::size_t i = 0;
  const std::size_t whole = n - n % lanes;
  if (!w) {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float m = 0.5f * (p[i + j] + o[i + j]);
        o[i + j] = p[i + j];
        acc[j] += m * m;
      }
  } else {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float m = 0.5f * (p[i + j] + o[i + j]);
        o[i + j] = p[i + j];
        acc[j] += m * m * w[i + j];
      }
  }
  for (; i < n; ++i) {
    const float m = 0.5f * (p[i] + o[i]);
    o[i] = p[i];
    acc[0] += w ? m * m * w[i] : m * m;
  }
  return lane_total(acc);
}

// o' = o / n_prev, then o = p k; out = {sum p^2 w, sum o'^2 w, sum p o' w} (w null: 1). n <= block.
TROUPE_GOODPUT_SIMD_CLONES void weigh_pair_block(float* __restrict o, const float* __restrict p,
                                                 const float* __restrict w, std::size_t n, float k,
                                                 float inv_prev, float* __restrict out) {
  float a[lanes] = {}, b[lanes] = {}, c[lanes] = {};
  std::size_t i = 0;
  const std::size_t whole = n - n % lanes;
  if (!w) {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = p[i + j], y = o[i + j] * inv_prev;
        o[i + j] = x * k;
        a[j] += x * x;
        b[j] += y * y;
        c[j] += x * y;
      }
  } else {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) {
        const float x = p[i + j], y = o[i + j] * inv_prev, v = w[i + j];
        o[i + j] = x * k;
        a[j] += x * x * v;
        b[j] += y * y * v;
        c[j] += x * y * v;
      }
  }
  for (; i < n; ++i) {
    const float x = p[i], y = o[i] * inv_prev, v = w ? w[i] : 1.0f;
    o[i] = x * k;
    a[0] += x * x * v;
    b[0] += y * y * v;
    c[0] += x * y * v;
  }
  out[0] = lane_total(a);
  out[1] = lane_total(b);
  out[2] = lane_total(c);
}

TROUPE_GOODPUT_SIMD_CLONES float sqr_block(const float* __restrict p, const float* __restrict w,
                                           std::size_t n) {
  float acc[lanes] = {};
  std::size_t i = 0;
  const std::size_t whole = n - n % lanes;
  if (!w) {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) acc[j] += p[i + j] * p[i + j];
  } else {
    for (; i < whole; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) acc[j] += p[i + j] * p[i + j] * w[i + j];
  }
  for (; i < n; ++i) acc[0] += w ? p[i] * p[i] * w[i] : p[i] * p[i];
  return lane_total(acc);
}

// w = 1 / (sqrt(max(v c, floor)) + eps)^2: Adam's preconditioner, squared and inverted.
TROUPE_GOODPUT_SIMD_CLONES void preconditioner_weights(float* __restrict w, const float* __restrict v,
                                                       std::size_t n, float c, float eps, float floor) {
  for (std::size_t i = 0; i < n; ++i) {
    const float p = std::sqrt(std::max(v[i] * c, floor)) + eps;
    w[i] = 1.0f / (p * p);
  }
}

TROUPE_GOODPUT_SIMD_CLONES float sum_block(const float* __restrict p, std::size_t n) {
  float acc[lanes] = {};
  std::size_t i = 0;
  const std::size_t whole = n - n % lanes;
  for (; i < whole; i += lanes)
    for (std::size_t j = 0; j < lanes; ++j) acc[j] += p[i + j];
  for (; i < n; ++i) acc[0] += p[i];
  return lane_total(acc);
}
}  // namespace
bool preconditioner_due(bool active, std::uint64_t at_step, std::uint64_t min_step, bool force) {
  if (min_step < 5) return false;
  return !active || force || min_step >= at_step + 16;
}

float adam_inv_correction(double beta2, std::uint64_t t) {
  return static_cast<float>(1.0 / (1.0 - std::pow(beta2, static_cast<double>(t))));
}

bool preconditioner::refresh(trainer_backend& be, bool force) {
  if (cfg_.type != "adam") return false;
  auto& state = be.optimizer_state();
  const auto& layout = be.layout();
  std::uint64_t min_step = UINT64_MAX;
  for (const auto& s : state) min_step = std::min(min_step, s.step);
  if (state.empty() || !preconditioner_due(active_, at_step_, min_step, force)) return false;
  const bool was = active_;
  w_.resize(be.gradients().size());
  for (std::size_t k = 0; k < layout.size() && k < state.size(); ++k) {
    const std::size_t n = layout[k].size;
    if (state[k].values.size() < 2 * n) return false;  // no second moments: leave it plain
    const float* v = state[k].values.data() + n;
    const float c = adam_inv_correction(cfg_.beta2, state[k].step);
    preconditioner_weights(w_.data() + layout[k].offset, v, n, c, static_cast<float>(cfg_.epsilon),
                           adam_floor(std::span(v, n), c, cfg_.beta2));
  }
  active_ = true;
  at_step_ = min_step;
  return !was;
}

double weigh_into(std::span<float> buf, std::span<const float> g, float n, bool first,
                  std::span<const float> w, bool norm) {
  const float* p = g.data();
  float* o = buf.data();
  const std::size_t size = g.size();
  if (!norm) {
    if (first)
      for (std::size_t i = 0; i < size; ++i) o[i] = p[i] * n;
    else
      for (std::size_t i = 0; i < size; ++i) o[i] += p[i] * n;
    return 0;
  }
  double total = 0;
  for (std::size_t b = 0; b < size; b += block)
    total +=
        weigh_block(o + b, p + b, w.empty() ? nullptr : w.data() + b, std::min(block, size - b), n, !first);
  return total;
}

double average_out(std::span<float> g, std::span<const float> buf, float n, std::span<const float> w,
                   bool norm) {
  float* p = g.data();
  const float* o = buf.data();
  const std::size_t size = g.size();
  if (!norm) {
    for (std::size_t i = 0; i < size; ++i) p[i] = o[i] / n;
    return 0;
  }
  double total = 0;
  for (std::size_t b = 0; b < size; b += block)
    total += average_block(p + b, o + b, w.empty() ? nullptr : w.data() + b, std::min(block, size - b), n);
  return total;
}

double sqr_norm(std::span<const float> g, std::span<const float> w) {
  double total = 0;
  for (std::size_t b = 0; b < g.size(); b += block)
    total += sqr_block(g.data() + b, w.empty() ? nullptr : w.data() + b, std::min(block, g.size() - b));
  return total;
}

void adam_weights(std::span<float> w, std::span<const float> v, float inv_corr, float eps, float floor) {
  preconditioner_weights(w.data(), v.data(), w.size(), inv_corr, eps, floor);
}

float adam_floor(std::span<const float> v, float inv_corr, double beta2) {
  if (v.empty()) return 0.0f;
  double total = 0;
  for (std::size_t b = 0; b < v.size(); b += block)
    total += sum_block(v.data() + b, std::min(block, v.size() - b));
  return static_cast<float>((1.0 - beta2) * total / static_cast<double>(v.size()) * inv_corr);
}

pair_norms weigh_pair_into(std::span<float> buf, std::span<const float> g, float n, float n_prev,
                           std::span<const float> w) {
  pair_norms out;
  const float inv_prev = 1.0f / n_prev;
  for (std::size_t b = 0; b < g.size(); b += block) {
    float part[3];
    weigh_pair_block(buf.data() + b, g.data() + b, w.empty() ? nullptr : w.data() + b,
                     std::min(block, g.size() - b), n, inv_prev, part);
    out.sqr += part[0];
    out.prev_sqr += part[1];
    out.cross += part[2];
  }
  return out;
}

double pair_sqr_and_keep(std::span<const float> g, std::span<float> prev, std::span<const float> w) {
  double total = 0;
  for (std::size_t b = 0; b < g.size(); b += block)
    total += pair_block(g.data() + b, prev.data() + b, w.empty() ? nullptr : w.data() + b,
                        std::min(block, g.size() - b));
  return total;
}

}  // namespace troupe::actors::goodput
