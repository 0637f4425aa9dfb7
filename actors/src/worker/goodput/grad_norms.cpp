#include "grad_norms.hpp"

#include <cmath>
#include <cstring>

namespace troupe::actors::goodput {

namespace {
constexpr std::size_t lanes = 8;  // independent float sums: vectorisable without -ffast-math
constexpr std::size_t block = 4096;

// Sums f(i) over [0, n) in float lanes per block, blocks in double.
template <class F>
double blocked_sum(std::size_t n, F&& f) {
  double total = 0;
  for (std::size_t b = 0; b < n; b += block) {
    const std::size_t e = std::min(n, b + block);
    float acc[lanes] = {};
    std::size_t i = b;
    for (; i + lanes <= e; i += lanes)
      for (std::size_t j = 0; j < lanes; ++j) acc[j] += f(i + j);
    for (; i < e; ++i) acc[0] += f(i);
    double s = 0;
    for (float a : acc) s += a;
    total += s;
  }
  return total;
}
}  // namespace

bool preconditioner::refresh(trainer_backend& be, bool force) {
  if (cfg_.type != "adam") return false;
  auto& state = be.optimizer_state();
  const auto& layout = be.layout();
  std::uint64_t min_step = UINT64_MAX;
  for (const auto& s : state) min_step = std::min(min_step, s.step);
  if (state.empty() || min_step < 5) return false;
  const bool was = active_;
  if (active_ && !force && min_step < at_step_ + 16) return false;
  w_.resize(be.gradients().size());
  for (std::size_t k = 0; k < layout.size() && k < state.size(); ++k) {
    const std::size_t n = layout[k].size;
    if (state[k].values.size() < 2 * n) return false;  // no second moments: leave it plain
    const float* v = state[k].values.data() + n;
    const double corr = 1.0 - std::pow(cfg_.beta2, static_cast<double>(state[k].step));
    const float inv_corr = static_cast<float>(1.0 / corr);
    const float eps = static_cast<float>(cfg_.epsilon);
    float* w = w_.data() + layout[k].offset;
    for (std::size_t i = 0; i < n; ++i) {
      const float p = std::sqrt(v[i] * inv_corr) + eps;
      w[i] = 1.0f / (p * p);
    }
  }
  active_ = true;
  at_step_ = min_step;
  return !was;
}

double weigh_into(std::span<float> buf, std::span<const float> g, float n, bool first,
                  std::span<const float> w, bool norm) {
  const float* p = g.data();
  const std::size_t size = g.size();
  if (!norm) {
    if (first)
      for (std::size_t i = 0; i < size; ++i) buf[i] = p[i] * n;
    else
      for (std::size_t i = 0; i < size; ++i) buf[i] += p[i] * n;
    return 0;
  }
  float* o = buf.data();
  const float* q = w.empty() ? nullptr : w.data();
  if (first && !q)
    return blocked_sum(g.size(), [=](std::size_t i) { return (o[i] = p[i] * n, p[i] * p[i]); });
  if (first)
    return blocked_sum(g.size(), [=](std::size_t i) { return (o[i] = p[i] * n, p[i] * p[i] * q[i]); });
  if (!q) return blocked_sum(g.size(), [=](std::size_t i) { return (o[i] += p[i] * n, p[i] * p[i]); });
  return blocked_sum(g.size(), [=](std::size_t i) { return (o[i] += p[i] * n, p[i] * p[i] * q[i]); });
}

double average_out(std::span<float> g, std::span<const float> buf, float n, std::span<const float> w,
                   bool norm) {
  float* p = g.data();
  if (!norm) {
    for (std::size_t i = 0; i < g.size(); ++i) p[i] = buf[i] / n;
    return 0;
  }
  const float* o = buf.data();
  const float* q = w.empty() ? nullptr : w.data();
  if (!q) return blocked_sum(g.size(), [=](std::size_t i) { return (p[i] = o[i] / n, p[i] * p[i]); });
  return blocked_sum(g.size(), [=](std::size_t i) { return (p[i] = o[i] / n, p[i] * p[i] * q[i]); });
}

double sqr_norm(std::span<const float> g, std::span<const float> w) {
  const float* p = g.data();
  if (w.empty()) return blocked_sum(g.size(), [p](std::size_t i) { return p[i] * p[i]; });
  const float* q = w.data();
  return blocked_sum(g.size(), [p, q](std::size_t i) { return p[i] * p[i] * q[i]; });
}

double pair_sqr_and_keep(std::span<const float> g, std::span<float> prev, std::span<const float> w) {
  const float* p = g.data();
  float* o = prev.data();
  const float* q = w.empty() ? nullptr : w.data();
  double s = blocked_sum(g.size(), [p, o, q](std::size_t i) {
    const float m = 0.5f * (p[i] + o[i]);
    return q ? m * m * q[i] : m * m;
  });
  std::memcpy(o, p, g.size() * sizeof(float));
  return s;
}

}  // namespace troupe::actors::goodput
