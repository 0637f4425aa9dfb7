#include "push_noise.hpp"

#include <algorithm>
#include <cmath>

#include "grad_norms.hpp"

namespace troupe::actors {

push_noise::push_noise(const std::map<std::string, std::size_t>& sizes, double base_batch, std::size_t every,
                       const nn::optimizer_config& opt)
    : opt_(opt), ns_(base_batch), schedule_(every) {
  for (const auto& [name, n] : sizes) {
    at_[name] = {total_, n, 0};
    total_ += n;
  }
  prev_.assign(total_, 0.0f);
  if (opt_.type == "adam") weights_.assign(total_, 1.0f);
}

// Which pushes keep and pair: goodput::pair_schedule (1 pair in `every` pushes; a push whose rows
// break a pair only delays it by one).
bool push_noise::begin(std::uint32_t rows) {
  const auto t = schedule_.begin(total_ > 0 ? rows : 0);
  pair_ = t.pair;
  keep_ = t.keep;
  rows_ = rows;
  kept_ = paired_ = 0;
  sqr_ = prev_sqr_ = cross_ = 0;
  return keep_ || pair_;
}

void push_noise::tensor(const std::string& name, std::span<const float> g, const nn::dense_slots& slots) {
  auto it = at_.find(name);
  if (!(keep_ || pair_) || it == at_.end() || it->second.size != g.size()) return;
  auto& t = it->second;
  const std::span<float> prev(prev_.data() + t.offset, t.size);
  // Adam's preconditioner once its second moments have 5 steps; the push's first tensor decides.
  const bool adam = opt_.type == "adam" && slots.values.size() >= 2 * t.size && slots.step >= 5;
  if (kept_ == 0 && paired_ == 0) weighted_ = adam;
  if (adam != weighted_) return;  // tensors of one push at other steps: the push does not count
  if (pair_) {
    const auto w = weighted_ ? std::span<float>(weights_.data() + t.offset, t.size) : std::span<float>();
    if (weighted_ && goodput::preconditioner_due(t.weights_at > 0, t.weights_at, slots.step, false)) {
      const auto v = std::span<const float>(slots.values).subspan(t.size, t.size);
      const float c = goodput::adam_inv_correction(opt_.beta2, slots.step);
      goodput::adam_weights(w, v, c, static_cast<float>(opt_.epsilon), goodput::adam_floor(v, c, opt_.beta2));
      t.weights_at = slots.step;
    }
    // One pass: |g|^2, |g'|^2, g.g', and prev becomes g (the keep of every = 1).
    const auto p = goodput::weigh_pair_into(prev, g, 1.0f, 1.0f, w);
    sqr_ += p.sqr, prev_sqr_ += p.prev_sqr, cross_ += p.cross;
    paired_ += t.size;
    if (keep_) kept_ += t.size;
    return;
  }
  std::copy(g.begin(), g.end(), prev.begin());
  kept_ += t.size;
}

void push_noise::end() {
  if (pair_ && paired_ == total_) {
    if (weighted_ != preconditioned_) {  // the plain and the preconditioned norms do not mix
      ns_.reset();
      preconditioned_ = weighted_;
    }
    const double b = rows_;
    ns_.add({0.5 * (sqr_ + prev_sqr_), 0.25 * (sqr_ + prev_sqr_ + 2.0 * cross_), b, 2.0 * b,
             static_cast<double>(schedule_.every())},
            true);
  }
  schedule_.end(pair_ && paired_ == total_, keep_ && kept_ == total_);
  keep_ = pair_ = false;
}

shard_noise push_noise::report() const {
  return {ns_.raw_sqr(), ns_.raw_var(), ns_.rounds(), preconditioned_};
}

namespace {
// state(): a layout version, M0, whether the norms are preconditioned, then noise_scale::pack's.
constexpr float kStateLayout = 1.0f;
constexpr std::size_t kStateHead = 3;
}  // namespace

std::vector<float> push_noise::state() const {
  std::vector<float> out(kStateHead + goodput::noise_scale::state_floats);
  out[0] = kStateLayout;
  out[1] = static_cast<float>(ns_.base_batch());
  out[2] = preconditioned_ ? 1.0f : 0.0f;
  ns_.pack(std::span(out).subspan(kStateHead));
  return out;
}

bool push_noise::restore(std::span<const float> in) {
  if (in.size() != kStateHead + goodput::noise_scale::state_floats || in[0] != kStateLayout) return false;
  if (in[1] != static_cast<float>(ns_.base_batch())) return false;
  if (!std::all_of(in.begin(), in.end(), [](float f) { return std::isfinite(f); })) return false;
  const bool preconditioned = in[2] != 0.0f;
  if (preconditioned && opt_.type != "adam") return false;
  if (in[kStateHead + 5] < 0.0f) return false;  // rounds
  ns_.unpack(in.subspan(kStateHead));
  preconditioned_ = preconditioned;
  return true;
}

}  // namespace troupe::actors
