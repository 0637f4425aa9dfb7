#include "noise_scale.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace troupe::actors::goodput {

gns_estimate estimate(const gns_sample& s) {
  gns_estimate e;
  if (!(s.b_big > s.b_small) || !(s.b_small > 0)) return e;
  e.sqr = (s.b_big * s.big_sqr - s.b_small * s.small_sqr) / (s.b_big - s.b_small);
  e.trace = (s.small_sqr - s.big_sqr) / (1.0 / s.b_small - 1.0 / s.b_big);
  return e;
}

noise_scale::noise_scale(double base_batch, double smoothing)
    : base_(std::max(1.0, base_batch)), smoothing_(smoothing) {}

void noise_scale::update(double& biased, double& unbias, double value, double theta) {
  biased = theta * biased + (1.0 - theta) * value;
  unbias = theta * unbias + (1.0 - theta);
}

bool noise_scale::add(const gns_sample& s, bool biased) {
  auto e = estimate(s);
  if (!std::isfinite(e.sqr) || !std::isfinite(e.trace) || !(s.b_big > s.b_small)) return false;
  const double theta = std::pow(smoothing_, s.b_big * std::max(1.0, s.rounds) / base_);
  if (rounds_ > 0 && biased != from_pairs_) hand_over(theta);
  from_pairs_ = biased;
  update(sqr_biased_, sqr_unbias_, e.sqr, theta);
  update(var_biased_, var_unbias_, e.trace / base_, theta);
  ++rounds_;
  return true;
}

void noise_scale::hand_over(double theta) {
  // Both averages share their weights (each round updates both with one theta).
  const double weight = handover_rounds * (1.0 - theta);
  if (!(sqr_unbias_ > weight)) return;
  const double keep = weight / sqr_unbias_;
  sqr_biased_ *= keep;
  sqr_unbias_ *= keep;
  var_biased_ *= keep;
  var_unbias_ *= keep;
}

void noise_scale::reset() {
  sqr_biased_ = sqr_unbias_ = var_biased_ = var_unbias_ = 0;
  rounds_ = 0;
}

double noise_scale::raw_sqr() const {
  return sqr_unbias_ > 0 ? sqr_biased_ / sqr_unbias_ : 0.0;
}

double noise_scale::raw_var() const {
  return var_unbias_ > 0 ? var_biased_ / var_unbias_ : 0.0;
}

double noise_scale::floor_sqr(double raw) {
  return std::max(0.0, raw);
}

double noise_scale::floor_var(double raw) {
  return std::max(1e-6, raw);
}

double noise_scale::sqr() const {
  return floor_sqr(raw_sqr());
}

double noise_scale::var() const {
  return floor_var(raw_var());
}

double noise_scale::trace() const {
  return var() * base_;
}

double noise_scale::noise_scale_samples() const {
  if (!ready()) return 0;
  // Diverged gradients: not a number, never "infinite" (the floor turns a NaN |G|^2 into 0).
  if (std::isnan(raw_sqr()) || std::isnan(raw_var())) return std::numeric_limits<double>::quiet_NaN();
  const double s = sqr();
  return s > 0 ? trace() / s : std::numeric_limits<double>::infinity();
}

double noise_scale::gain(double scale) const {
  if (!ready() || !(scale > 0)) return 1.0;
  const double v = var(), s = sqr();
  return (v + s) / (v / scale + s);
}

double noise_scale::efficiency(double batch) const {
  const double scale = batch / base_;
  return scale > 0 ? gain(scale) / scale : 1.0;
}

void noise_scale::pack(std::span<float> out) const {
  out[0] = static_cast<float>(sqr_biased_);
  out[1] = static_cast<float>(sqr_unbias_);
  out[2] = static_cast<float>(var_biased_);
  out[3] = static_cast<float>(var_unbias_);
  out[4] = from_pairs_ ? 1.0f : 0.0f;
  out[5] = static_cast<float>(std::min<std::uint64_t>(rounds_, 1u << 24));
}

void noise_scale::unpack(std::span<const float> in) {
  sqr_biased_ = in[0];
  sqr_unbias_ = in[1];
  var_biased_ = in[2];
  var_unbias_ = in[3];
  from_pairs_ = in[4] != 0.0f;
  rounds_ = static_cast<std::uint64_t>(in[5]);
}

pair_schedule::pair_schedule(std::size_t every) : every_(std::max<std::size_t>(1, every)) {}

pair_schedule::turn pair_schedule::begin(std::uint64_t rows) {
  const std::uint64_t at = steps_++;
  rows_ = rows;
  if (rows == 0 || at < next_) {
    kept_rows_ = 0;
    return {};
  }
  turn t;
  t.pair = kept_rows_ == rows;
  t.keep = every_ == 1 || !t.pair;
  return t;
}

void pair_schedule::end(bool paired, bool kept) {
  if (paired) next_ = steps_ + every_ - 2;  // the keep every_ - 1 steps after this one's
  kept_rows_ = kept ? rows_ : 0;
}

}  // namespace troupe::actors::goodput
