// The gradient noise scale of a job (McCandlish et al., "An empirical model of large-batch training",
// 2018), as Pollux (OSDI '21) and AdaptDL measure it, and what AdaScale (Johnson et al., ICML '20)
// and Pollux's goodput derive from it. docs/goodput.md has the derivation and what troupe measures.
//
// For a minibatch gradient g_B of B independent samples, E|g_B|^2 = |G|^2 + tr(Sigma)/B, with G the
// true gradient and Sigma the covariance of one sample's gradient. Two batch sizes give two equations:
// the squared norms of `count` small batches' gradients g_i (B_small samples each) and of their mean
// g (B_big = count * B_small samples) estimate, without bias,
//   |G|^2     = (B_big |g|^2 - B_small mean|g_i|^2) / (B_big - B_small)
//   tr(Sigma) = (mean|g_i|^2 - |g|^2) / (1/B_small - 1/B_big)
// Single estimates are very noisy; `noise_scale` keeps their bias-corrected exponential moving
// averages, each weighted by the samples it saw (Pollux's smoothing 0.999 per base batch).
//
// Units: `var()` is the variance of a gradient over the job's base batch M0 (the job file's workers x
// batch_size), tr(Sigma)/M0, which is what Pollux's formulas take (its `grad_var`); `trace()` is per
// sample; noise_scale() = tr(Sigma)/|G|^2 in samples (B_noise; Pollux's PGNS is var/sqr * M0, the same).
//
// Used by the worker's goodput controller (worker/goodput/) and by the PS shards, which estimate from
// the pushes they receive (ps/push_noise.hpp).
//
// Values only, no I/O, no threads; every replica of a ring that adds the same samples in the same
// order holds the same state to the bit (the ring's sums are bitwise equal on every rank).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace troupe::actors::goodput {

// One round's squared norms: `small_sqr` the mean over the small batches of |g_i|^2, `big_sqr`
// |g|^2 of their mean; b_small samples per small batch, b_big in all (b_big > b_small > 0).
// `rounds`: how many rounds of b_big samples the sample stands for in the moving averages (the
// norms computed on 1 round in `rounds`: the averages keep their time constant in samples).
struct gns_sample {
  double small_sqr = 0, big_sqr = 0;
  double b_small = 0, b_big = 0;
  double rounds = 1;
};

// One round's unbiased estimates (each may be negative: noise).
struct gns_estimate {
  double sqr = 0;    // |G|^2
  double trace = 0;  // tr(Sigma), of one sample's gradient
};

gns_estimate estimate(const gns_sample& s);

class noise_scale {
 public:
  // `base_batch`: M0, the job's initial global batch; `smoothing`: the moving averages keep
  // smoothing^(samples / M0) of their value per round.
  explicit noise_scale(double base_batch, double smoothing = 0.999);

  // Adds one round. `biased`: from two consecutive steps of one replica (the parameters moved
  // between them) rather than from one step's replicas or accumulated micro-batches. At a switch from
  // one kind to the other (a ring shrunk to one replica, or grown from one) the averages keep their
  // value with the weight of `handover_rounds` rounds, so that the new kind's rounds take over within
  // a few dozen (Pollux starts over: a job that passed through a ring of one at every death or
  // shrink then chose its batch, and scaled its rate, on 1-3 rounds whose |G|^2 sat at its floor 0,
  // i.e. an "infinite" noise scale: max_batch, learning rate x16). A sample with a non-finite norm is
  // ignored (false).
  bool add(const gns_sample& s, bool biased);
  static constexpr double handover_rounds = 10;
  // Starts over (the preconditioner changed: Adam's second moments became usable).
  void reset();

  bool ready() const { return rounds_ > 0; }
  std::uint64_t rounds() const { return rounds_; }
  double base_batch() const { return base_; }
  // The averages, floored as Pollux floors them: |G|^2 >= 0, var >= 1e-6 (tr(Sigma) >= 1e-6 M0).
  double sqr() const;
  double var() const;    // tr(Sigma) / M0
  double trace() const;  // tr(Sigma)
  // The averages before the floors: what parts of one gradient (a PS shard's slice each) report, so
  // that their sum is the whole gradient's (the norms, and so the estimates, add up over coordinates).
  double raw_sqr() const;
  double raw_var() const;
  // The floors of sqr() and var(), for averages summed from parts (the PS shards').
  static double floor_sqr(double raw);
  static double floor_var(double raw);
  // tr(Sigma) / |G|^2 in samples; 0 before the first round, +inf when |G|^2 is 0.
  double noise_scale_samples() const;
  // AdaScale's gain ratio at `scale` = global batch / M0: (var + sqr) / (var / scale + sqr), in
  // [min(1, scale), max(1, scale)]; 1 before the first round.
  double gain(double scale) const;
  // Pollux's statistical efficiency of a global batch: gain(batch / M0) / (batch / M0), i.e.
  // (B_noise + M0) / (B_noise + batch); 1 at M0.
  double efficiency(double batch) const;

  // The state as floats, for a resynchronised ring: the most trained replica's goes to every rank.
  static constexpr std::size_t state_floats = 6;
  void pack(std::span<float> out) const;
  void unpack(std::span<const float> in);

 private:
  void update(double& biased, double& unbias, double value, double theta);
  // The averages down to the weight of handover_rounds rounds of `theta` (their value kept).
  void hand_over(double theta);
  double base_, smoothing_;
  double sqr_biased_ = 0, sqr_unbias_ = 0, var_biased_ = 0, var_unbias_ = 0;
  bool from_pairs_ = false;  // the averages hold biased (consecutive-step) estimates
  std::uint64_t rounds_ = 0;
};

// Which steps of a stream make the biased pairs of consecutive steps (a lone replica's batches under
// async_ps, a PS shard's pushes), 1 pair in `every`: from step `next` on, a step pairs with the one
// before when that one was kept with the same rows, and keeps its own gradients when it made no pair
// (every = 1: every step does both); a pair made moves the next keep every - 1 steps on. A step of
// other rows where a pair was due (a task's short last batch) only delays the pair by one: the
// steps' rows repeat with a period of their own (a worker's tasks of 8 batches; 2 workers' pushes:
// 16), and a fixed phase could land on the short one for a whole run (seen: a shard's estimate
// frozen at its first pair).
class pair_schedule {
 public:
  explicit pair_schedule(std::size_t every);
  struct turn {
    bool pair = false;  // pairs with the kept step
    bool keep = false;  // keeps its own gradients for the next
  };
  // A step of `rows` samples begins (0: it cannot take part: it breaks a pair).
  turn begin(std::uint64_t rows);
  // The step that began ends: `paired` when it made its pair, `kept` when its gradients were kept
  // whole. Not needed after a begin that returned neither.
  void end(bool paired, bool kept);
  std::size_t every() const { return every_; }

 private:
  std::size_t every_;
  std::uint64_t steps_ = 0;
  std::uint64_t next_ = 0;       // the first step of the next keep-and-pair
  std::uint64_t rows_ = 0;       // the step in progress's
  std::uint64_t kept_rows_ = 0;  // the kept step's rows (0: none)
};

}  // namespace troupe::actors::goodput
