// Squared gradient norms for the noise-scale estimate (noise_scale.hpp), fused into the loops a ring
// strategy runs over its gradients anyway (weighting them into the allreduce buffer, averaging them
// out of it), so that the estimate costs a multiply-add per element and no extra pass.
//
// With Adam the norms are of the preconditioned gradient, as Pollux measures them: g_i / p_i with
// p_i = sqrt(v_i / (1 - beta2^t)) + epsilon (v: Adam's second moment, t: the parameter's steps), i.e.
// |g|_P^2 = sum g_i^2 w_i with w_i = 1 / p_i^2; the preconditioner is used once every parameter has
// taken 5 steps (before, v is mostly its bias correction) and is refreshed every 16 steps (it moves
// slowly: beta2 = 0.999). Other optimizers: the plain gradient (w = 1).
//
// The weights are bounded as Adam bounds its own step. A coordinate whose v is (near) 0 — the weight
// of an input that no example so far has lit, as Fashion-MNIST's border pixels — would weigh up to
// 1 / eps^2 (1e14), and the example that lights it later adds an enormous term to every norm of
// that round, which the moving averages then keep (docs/goodput.md: B_noise frozen at its first
// rounds, or |G|^2 at its floor 0 and the batch at max_batch). Adam's update divides by the root of
// a v that already holds the step's own gradient, so its squared preconditioned gradient is at most
// (1 - beta2^t) / (1 - beta2); w here comes from v before the step, so it is bounded the same way
// for a gradient of the tensor's typical size: v / (1 - beta2^t) is floored, per tensor, at
// (1 - beta2) x its mean over the tensor (adam_floor). Coordinates above the floor keep Adam's weight.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "troupe/actors/trainer_backend.hpp"
#include "troupe/nn/optimizer.hpp"

namespace troupe::actors::goodput {

// When Adam's preconditioner is (re)computed, here and on the device path (allreduce_gpu.cpp): once
// every parameter has taken 5 steps (`min_step`), then every 16 steps after the last (`at_step`), or
// at once when `force`d and already in use.
bool preconditioner_due(bool active, std::uint64_t at_step, std::uint64_t min_step, bool force);
// Adam's bias correction of v at step t: 1 / (1 - beta2^t).
float adam_inv_correction(double beta2, std::uint64_t t);

class preconditioner {
 public:
  explicit preconditioner(const nn::optimizer_config& c) : cfg_(c) {}
  const nn::optimizer_config& config() const { return cfg_; }
  // Recomputes w from the backend's optimizer state when due (`force`: a resync changed it, or every
  // 16 steps). Returns true when the kind changed (plain -> preconditioned): the estimates of the
  // two kinds do not mix.
  bool refresh(trainer_backend& be, bool force);
  // Empty: the plain gradient.
  std::span<const float> weights() const {
    return active_ ? std::span<const float>(w_) : std::span<const float>();
  }

 private:
  nn::optimizer_config cfg_;
  std::vector<float> w_;
  bool active_ = false;
  std::uint64_t at_step_ = 0;
};

// buf = n g (first) or buf += n g; returns |g|_w^2 (w empty: 1), or 0 without `norm` (the plain loop).
double weigh_into(std::span<float> buf, std::span<const float> g, float n, bool first,
                  std::span<const float> w, bool norm = true);
// g = buf / n; returns |g|_w^2, or 0 without `norm`.
double average_out(std::span<float> g, std::span<const float> buf, float n, std::span<const float> w,
                   bool norm = true);
// |g|_w^2.
double sqr_norm(std::span<const float> g, std::span<const float> w);
// |(g + prev) / 2|_w^2, then prev = g.
double pair_sqr_and_keep(std::span<const float> g, std::span<float> prev, std::span<const float> w);

// A ring of one's pair in one pass: `buf` still holds n_prev g' (the previous step's sum), and
// becomes n g. Returns |g|_w^2, |g'|_w^2 and g.g'_w: no copy of g' is kept between the steps.
struct pair_norms {
  double sqr = 0, prev_sqr = 0, cross = 0;
  double small() const { return 0.5 * (sqr + prev_sqr); }               // mean |g_i|^2 of the two
  double big() const { return 0.25 * (sqr + prev_sqr + 2.0 * cross); }  // |(g + g') / 2|^2
};
pair_norms weigh_pair_into(std::span<float> buf, std::span<const float> g, float n, float n_prev,
                           std::span<const float> w);

// w = 1 / (sqrt(max(v inv_corr, floor)) + eps)^2 over w.size() floats: Adam's preconditioner from
// its second moments v at inv_corr = adam_inv_correction(beta2, t) (preconditioner::refresh's
// kernel), with floor = adam_floor(v, inv_corr, beta2) for one tensor's v.
void adam_weights(std::span<float> w, std::span<const float> v, float inv_corr, float eps, float floor);
// (1 - beta2) x the mean of v inv_corr over v (one tensor's second moments); 0 when v is empty.
float adam_floor(std::span<const float> v, float inv_corr, double beta2);

}  // namespace troupe::actors::goodput
