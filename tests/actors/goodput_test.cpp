// Goodput (docs/goodput.md): the gradient noise scale estimator against closed forms, AdaScale's
// gain and the learning-rate rules, Pollux's throughput model and goodput-optimal batch against
// bench/goodput/pollux_policy.py's values, the controller's batch choice, and the allreduce strategy's
// estimate on an in-process ring of 4 ranks (and a ring of one, from consecutive steps) whose fake
// backend computes gradients of known mean and covariance.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "gpu_fakes.hpp"
#include "grad_norms.hpp"
#include "in_process_ring.hpp"
#include "noise_scale.hpp"
#include "ps/push_noise.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/nn/model.hpp"
#include "worker/goodput/controller.hpp"
#include "worker/goodput/throughput_model.hpp"
#include "worker/worker_services.hpp"

namespace troupe::actors {
namespace {

using namespace goodput;

// ---- the estimator on synthetic norms ----

// Gradients of known mean G and per-sample covariance diag(sigma^2), as `ranks` batch means of
// `b` samples each: the squared norms the ring would sum.
struct synthetic {
  std::vector<double> g, sigma;
  std::vector<float> adam_v;  // set: the backends report Adam's second moments at adam_step
  static constexpr std::uint64_t adam_step = 100;
  std::mt19937_64 rng{7};
  double sqr() const {
    double s = 0;
    for (double x : g) s += x * x;
    return s;
  }
  double trace() const {
    double s = 0;
    for (double x : sigma) s += x * x;
    return s;
  }
  // One round: mean over ranks of |g_i|^2 and |mean g_i|^2.
  gns_sample round(int ranks, int b) {
    std::normal_distribution<double> z;
    std::vector<double> mean(g.size(), 0.0);
    double small = 0;
    for (int r = 0; r < ranks; ++r) {
      double sq = 0;
      for (std::size_t j = 0; j < g.size(); ++j) {
        const double v = g[j] + sigma[j] / std::sqrt(b) * z(rng);
        sq += v * v;
        mean[j] += v / ranks;
      }
      small += sq / ranks;
    }
    double big = 0;
    for (double v : mean) big += v * v;
    return {small, big, static_cast<double>(b), static_cast<double>(ranks) * b};
  }
};

// Adam's preconditioner from s.adam_v (grad_norms.hpp: w = 1 / (sqrt(max(v c, floor)) + eps)^2 with
// c = 1 / (1 - beta2^t) and each tensor's floor (1 - beta2) x its mean v c); `tensors`: the sizes of
// consecutive tensors (empty: one tensor of every coordinate).
std::vector<double> adam_weights(const synthetic& s, const nn::optimizer_config& c,
                                 std::vector<std::size_t> tensors = {}) {
  std::vector<double> w(s.adam_v.size());
  const double corr = 1.0 - std::pow(c.beta2, static_cast<double>(synthetic::adam_step));
  if (tensors.empty()) tensors = {w.size()};
  std::size_t at = 0;
  for (auto size : tensors) {
    double mean = 0;
    for (std::size_t j = at; j < at + size; ++j) mean += s.adam_v[j] / corr / static_cast<double>(size);
    for (std::size_t j = at; j < at + size; ++j) {
      const double p = std::sqrt(std::max(s.adam_v[j] / corr, (1.0 - c.beta2) * mean)) + c.epsilon;
      w[j] = 1.0 / (p * p);
    }
    at += size;
  }
  return w;
}

synthetic make_synthetic(std::size_t d, double g_sqr, double trace) {
  synthetic s;
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(0.5, 1.5);
  s.g.resize(d);
  s.sigma.resize(d);
  double gs = 0, ts = 0;
  for (std::size_t j = 0; j < d; ++j) {
    s.g[j] = u(rng) * (j % 2 ? 1 : -1);
    s.sigma[j] = u(rng);
    gs += s.g[j] * s.g[j];
    ts += s.sigma[j] * s.sigma[j];
  }
  for (auto& x : s.g) x *= std::sqrt(g_sqr / gs);
  for (auto& x : s.sigma) x *= std::sqrt(trace / ts);
  return s;
}

// Adam's second moments for `s`, as Adam's v would be: larger where the noise is (~ sigma^2), spread
// 16x more; with `unlit`, 1 coordinate in 16 has v = 0, as the weight of an input that no example had
// lit before this step (unbounded, it would weigh 1 / eps^2), and a gradient 1/32 of the others' (a
// rarely lit input's: at the floor's weight, it then counts about as much as a lit one).
synthetic with_adam_moments(synthetic s, bool unlit = false) {
  std::uniform_real_distribution<float> u(0.25f, 4.0f);
  std::mt19937_64 rng(11);
  s.adam_v.resize(s.g.size());
  for (std::size_t j = 0; j < s.adam_v.size(); ++j) {
    s.adam_v[j] = 1e-3f * u(rng) * static_cast<float>(s.sigma[j] * s.sigma[j]);
    if (!unlit || j % 16 != 5) continue;
    s.adam_v[j] = 0.0f;
    s.g[j] /= 32;
    s.sigma[j] /= 32;
  }
  return s;
}

TEST(NoiseScale, OneRoundsEstimateIsTheClosedForm) {
  // E|g_B|^2 = |G|^2 + tr/B: small and big norms of exactly their expectations give G and tr back.
  const double sqr = 0.8, tr = 300, bs = 32, bb = 128;
  auto e = estimate({sqr + tr / bs, sqr + tr / bb, bs, bb});
  EXPECT_NEAR(e.sqr, sqr, 1e-9);
  EXPECT_NEAR(e.trace, tr, 1e-9);
}

TEST(NoiseScale, SyntheticGradientsGiveTheKnownStatisticsWithinFivePercent) {
  auto s = make_synthetic(256, 1.0, 256.0);  // B_noise = 256 samples
  noise_scale ns(128);
  double mean_sqr = 0, mean_tr = 0;
  const int rounds = 4000;
  for (int i = 0; i < rounds; ++i) {
    auto r = s.round(4, 32);
    auto e = estimate(r);
    mean_sqr += e.sqr / rounds;
    mean_tr += e.trace / rounds;
    ASSERT_TRUE(ns.add(r, false));
  }
  EXPECT_NEAR(mean_sqr, s.sqr(), 0.05 * s.sqr());
  EXPECT_NEAR(mean_tr, s.trace(), 0.05 * s.trace());
  EXPECT_NEAR(ns.sqr(), s.sqr(), 0.05 * s.sqr());
  EXPECT_NEAR(ns.trace(), s.trace(), 0.05 * s.trace());
  EXPECT_NEAR(ns.var(), s.trace() / 128, 0.05 * s.trace() / 128);
  EXPECT_NEAR(ns.noise_scale_samples(), 256, 0.08 * 256);
}

// |G|^2 at its floor 0: infinite (reported as such, it read 0 until 2026-12-01), the gain finite;
// norms that are not numbers (a diverged job) are no estimate at all, never an "infinite" one.
TEST(NoiseScale, AFlooredSignalIsInfiniteAndADivergedRoundIsNoEstimate) {
  noise_scale floored(256);
  ASSERT_TRUE(floored.add({512.5, 200, 1, 2}, false));  // (2 x 200 - 512.5) / 1 < 0: floored to 0
  EXPECT_TRUE(std::isinf(floored.noise_scale_samples()));
  EXPECT_TRUE(std::isfinite(floored.gain(4)));
  EXPECT_FALSE(floored.add({std::numeric_limits<double>::quiet_NaN(), 256.5, 1, 2}, false));
  EXPECT_EQ(floored.rounds(), 1u);
}

TEST(NoiseScale, GainAndEfficiencyAreAdaScalesAndPollux) {
  noise_scale ns(256);
  // One exact round: |G|^2 = 0.5, tr = 512 (var at M0 = 2): pollux_policy GradParams(0.5, 2.0).
  ASSERT_TRUE(ns.add({512.5, 256.5, 1, 2}, false));
  EXPECT_NEAR(ns.sqr(), 0.5, 1e-12);
  EXPECT_NEAR(ns.var(), 2.0, 1e-12);
  EXPECT_NEAR(ns.noise_scale_samples(), 1024, 1e-9);  // pollux_policy.noise_scale(grad, 256)
  EXPECT_NEAR(ns.efficiency(1024), 0.625, 1e-12);     // pollux_policy.efficiency(grad, 256, 1024)
  EXPECT_NEAR(ns.gain(4), (2.0 + 0.5) / (2.0 / 4 + 0.5), 1e-12);
  EXPECT_DOUBLE_EQ(ns.gain(1), 1.0);
  EXPECT_GE(ns.gain(8), 1.0);
  EXPECT_LE(ns.gain(8), 8.0);
  EXPECT_LE(ns.gain(0.5), 1.0);  // a smaller batch than the base: a smaller step
}

TEST(NoiseScale, PairsAndRingRoundsDoNotMixAndStateTravels) {
  noise_scale a(64);
  ASSERT_TRUE(a.add({10, 6, 32, 128}, false));
  ASSERT_TRUE(a.add({11, 6, 32, 128}, false));
  EXPECT_EQ(a.rounds(), 2u);
  const double before = a.sqr();
  ASSERT_TRUE(a.add({10, 7, 64, 128}, true));  // a lone replica's pair: hands over (2 rounds < 10: whole)
  EXPECT_EQ(a.rounds(), 3u);
  EXPECT_NEAR(a.sqr(), (2 * before + (2 * 7 - 10)) / 3, 0.05 * before);
  EXPECT_FALSE(a.add({NAN, 1, 32, 64}, false));
  std::vector<float> st(noise_scale::state_floats);
  a.pack(st);
  noise_scale b(64);
  b.unpack(st);
  EXPECT_EQ(b.rounds(), a.rounds());
  EXPECT_NEAR(b.sqr(), a.sqr(), 1e-5 * std::abs(a.sqr()) + 1e-9);
  EXPECT_NEAR(b.var(), a.var(), 1e-5 * a.var());
}

// At a switch of kind (a ring shrunk to one replica pairs its consecutive steps; grown again, its
// replicas' norms) the averages keep their value with the weight of handover_rounds rounds: the new
// kind's first rounds move them little, a few dozen take over. (They started over: a job passing
// through a ring of one chose its batch and scaled its rate on 1-3 rounds.)
TEST(NoiseScale, AtASwitchOfKindTheOldEstimateHandsOverWithinAFewDozenRounds) {
  auto ring = make_synthetic(64, 4.0, 256.0);
  auto lone = make_synthetic(64, 1.0, 256.0);  // the pairs' (biased) estimate, another |G|^2
  noise_scale a(128);
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(a.add(ring.round(4, 32), false));
  EXPECT_NEAR(a.sqr(), 4.0, 0.4);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.add(lone.round(2, 32), true));
  EXPECT_GT(a.sqr(), 2.5) << "3 rounds of the new kind against the old estimate's 10";
  EXPECT_TRUE(std::isfinite(a.noise_scale_samples()));
  for (int i = 0; i < 3000; ++i) ASSERT_TRUE(a.add(lone.round(2, 32), true));
  EXPECT_NEAR(a.sqr(), 1.0, 0.1) << "the new kind took over";
  EXPECT_EQ(a.rounds(), 6003u);
}

// An estimate that stands for k rounds moves the averages as k rounds of the same value would: the
// averages keep their time constant when the norms are computed on 1 round in k.
TEST(NoiseScale, AnEstimateStandingForKRoundsIsKRoundsOfIt) {
  noise_scale every(64), strided(64);
  for (int i = 0; i < 40; ++i) {
    const gns_sample x{10.0 + i % 5, 6.0 + i % 3, 32, 128};
    for (int k = 0; k < 8; ++k) ASSERT_TRUE(every.add(x, false));
    gns_sample y = x;
    y.rounds = 8;
    ASSERT_TRUE(strided.add(y, false));
  }
  EXPECT_NEAR(strided.sqr(), every.sqr(), 1e-9 * std::abs(every.sqr()) + 1e-12);
  EXPECT_NEAR(strided.var(), every.var(), 1e-9 * every.var());
}

// ---- Pollux's throughput model: values of bench/goodput/pollux_policy.py ----

const perf_params truth{0.002, 0.0001, 0.004, 0.0005, 0.001, 0.0002, 1.3};

noise_scale pollux_grad() {  // GradParams(sqr=0.5, var=2.0) at M0 = 256
  noise_scale ns(256);
  ns.add({512.5, 256.5, 1, 2}, false);
  return ns;
}

TEST(ThroughputModel, GoodputAndBestBatchAreThoseOfPolluxPolicy) {
  auto g = pollux_grad();
  // pollux_policy.goodput(true, grad, 256, 1, 4, 128, 1) = 21242.68780413946
  EXPECT_NEAR(goodput::goodput(truth, g, 1, 4, 128, 1), 21242.68780413946, 1e-6);
  batch_limits lim;
  lim.max_batch = 4096;
  lim.max_atomic = 512;
  // best_batch(true, grad, 256, 1, 4, max_batch_size=4096, atomic_bsz_range=(None, 512), accumulation=True)
  auto b = best_batch(truth, g, 1, 4, lim);
  EXPECT_EQ(b.atomic, 85);
  EXPECT_EQ(b.accum, 0);
  EXPECT_NEAR(b.goodput, 28786.85067748296, 1e-6);
  auto one = best_batch(truth, g, 1, 1, lim);  // a lone replica: accumulates above M0
  EXPECT_EQ(one.atomic, 256);
  EXPECT_EQ(one.accum, 0);
  EXPECT_NEAR(one.goodput, 9275.36228862675, 1e-6);
  lim.max_local = 64;  // records_per_task caps a replica's batch
  auto capped = best_batch(truth, g, 1, 4, lim);
  EXPECT_LE(capped.atomic * (capped.accum + 1), 64);
}

// max_batch is the largest global batch: a replica's share rounded up took 3 replicas to 252 with
// max_batch 250 (3 x 84), and 3 to 2049 with 2048.
TEST(ThroughputModel, BestBatchNeverExceedsMaxBatch) {
  auto g = pollux_grad();  // M0 = 256
  for (double max_batch : {256.0, 257.0, 1000.0, 1024.0, 2048.0, 4097.0})
    for (int replicas : {1, 2, 3, 5, 7})
      for (double max_atomic : {0.0, 100.0, 512.0}) {
        batch_limits lim;
        lim.max_batch = max_batch;
        lim.max_atomic = max_atomic;
        const auto b = best_batch(truth, g, 1, replicas, lim);
        ASSERT_GT(b.atomic, 0);
        EXPECT_LE(replicas * b.atomic * (b.accum + 1), max_batch)
            << replicas << " replicas of " << b.atomic << " x " << b.accum + 1 << ", max_batch " << max_batch
            << ", max_local_batch " << max_atomic;
      }
}

// A replica's micro-batch is min_atomic rows at the least (the strategy's 2: a batch norm module cannot
// train on one row): max_batch 64 over 3 replicas in micro-batches of at most 2 was clamped to
// micro-batches of 1 (3 x 1 x 11), M0 = 4.
TEST(ThroughputModel, BestBatchKeepsMicroBatchesOfMinAtomicRows) {
  noise_scale g(4);
  g.add({0.5, 0.25, 1, 2}, false);
  batch_limits lim;
  lim.max_batch = 64;
  lim.max_atomic = 2;
  lim.min_atomic = 2;
  for (int replicas : {1, 2, 3, 5, 7}) {
    const auto b = best_batch(truth, g, 1, replicas, lim);
    ASSERT_GT(b.atomic, 0) << replicas;
    EXPECT_GE(b.atomic, 2) << replicas << " replicas of " << b.atomic << " x " << b.accum + 1;
  }
}

TEST(ThroughputModel, BestBatchAccumulatesBeyondTheTrustedMicroBatch) {
  auto g = pollux_grad();
  batch_limits lim;
  lim.max_batch = 4096;
  lim.max_atomic = 512;
  lim.max_trusted_atomic = 40;  // measured up to 20: the model is trusted to 40
  auto b = best_batch(truth, g, 1, 4, lim);
  EXPECT_LE(b.atomic, 40);
  EXPECT_GT(b.atomic, 0);
  // The same local batch as unbounded (85), in micro-batches of at most 40, or a smaller one.
  lim.max_trusted_atomic = 0;
  auto free = best_batch(truth, g, 1, 4, lim);
  EXPECT_EQ(free.atomic, 85);
  EXPECT_LE(b.goodput, free.goodput);
}

TEST(ThroughputModel, FitPredictsTheMeasuredTimesAsPolluxsFitDoes) {
  std::vector<observation> obs;
  const std::pair<int, int> places[] = {{1, 1}, {1, 2}, {1, 4}, {2, 4}, {2, 8}, {1, 3}};
  for (auto [h, r] : places)
    for (double b : {32.0, 64.0, 128.0}) {
      const double c = compute_time(truth, b);
      obs.push_back({h, r, b, c, step_time(truth, h, r, b)});
    }
  auto p = fit(obs);
  // pollux_policy.fit_perf_params on the same data predicts every step within 3.5% (its priors);
  // troupe's fit must do as well.
  for (const auto& o : obs) {
    EXPECT_NEAR(step_time(p, o.hosts, o.replicas, o.atomic), o.sync, 0.035 * o.sync)
        << o.hosts << " hosts, " << o.replicas << " replicas, batch " << o.atomic;
    EXPECT_NEAR(compute_time(p, o.atomic), o.compute, 0.01 * o.compute);
  }
  EXPECT_GE(p.gamma, 1.0);
  EXPECT_LE(p.gamma, 10.0);
  // One configuration: alpha_c pinned to half the compute time, as Pollux pins it.
  auto one = fit({{1, 4, 64, 0.01, 0.013}});
  EXPECT_DOUBLE_EQ(one.alpha_c, 0.005);
  EXPECT_NEAR(step_time(one, 1, 4, 64), 0.013, 0.01 * 0.013);
  EXPECT_NEAR(one.beta_c, 7.8125e-05, 1e-6);  // Pollux: 7.8125e-05
}

// ---- the controller ----

controller_options opts(lr_rule rule, bool auto_batch, double m0 = 128) {
  controller_options o;
  o.rule = rule;
  o.auto_batch = auto_batch;
  o.base_batch = m0;
  o.batch_size = static_cast<std::size_t>(m0 / 4);
  o.limits.max_batch = 16 * m0;
  o.limits.max_atomic = 1024;
  o.warm_rounds = 10;
  o.estimate_every = 1;  // Pollux's: the norms every round (NormsOnOneRoundInEvery: every 4th)
  return o;
}

TEST(Controller, RulesScaleTheLearningRate) {
  // A ring of 8 with the job file's 4 workers of 32: S = 2.
  for (auto rule : {lr_rule::none, lr_rule::linear, lr_rule::sqrt, lr_rule::adascale}) {
    controller c(opts(rule, false));
    std::vector<float> v(controller::vote_floats, 0.0f), sum(controller::vote_floats, 0.0f);
    for (int rank = 0; rank < 8; ++rank) {
      c.cast(v, rank, 8, true, 40.0, 0.01, 0);
      for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
    auto r = c.read(sum, 0, 8, 1, 30.0, 1.0, 256, false, 1.0);
    const double want = rule == lr_rule::none     ? 1.0
                        : rule == lr_rule::linear ? 2.0
                        : rule == lr_rule::sqrt   ? std::sqrt(2.0)
                                                  : 1.0;  // no estimate before this round: gain 1
    EXPECT_DOUBLE_EQ(r.lr_factor, want) << to_string(rule);
  }
  controller a(opts(lr_rule::adascale, false));
  std::vector<float> v(controller::vote_floats);
  a.cast(v, 0, 8, true, 40.0, 0.01, 0);
  const double s = a.noise().gain(2.0);
  EXPECT_DOUBLE_EQ(s, 1.0);
  auto o = opts(lr_rule::adascale, false);
  o.adaptive = true;
  controller adam(o);
  EXPECT_EQ(to_string(parse_lr_rule("adascale")), std::string("adascale"));
}

// The reported factor is the last full step's: a task's short last batch (a quarter of a round here)
// scales its own step's rate, not what the job trains at (the report said 0.5 for a job at x2).
TEST(Controller, TheReportedFactorIsTheLastFullSteps) {
  controller c(opts(lr_rule::linear, false));
  std::vector<float> v(controller::vote_floats, 0.0f), sum(controller::vote_floats, 0.0f);
  for (int rank = 0; rank < 8; ++rank) {
    c.cast(v, rank, 8, true, 40.0, 0.01, 0);
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  auto full = c.read(sum, 0, 8, 1, 30.0, 1.0, 256, false, 1.0);
  EXPECT_DOUBLE_EQ(full.lr_factor, 2.0);
  EXPECT_DOUBLE_EQ(c.report().lr_factor, 2.0);
  auto tail = c.read(sum, 0, 8, 1, 30.0, 0.25, 64, false, 1.1);
  EXPECT_DOUBLE_EQ(tail.lr_factor, 2.0) << "the rule's factor; the strategy scales it by the share";
  EXPECT_DOUBLE_EQ(c.report().lr_factor, 2.0) << "not 2 x 0.25";
}

// Every rank's vote, summed as the ring would: small norms of `small`, the ranks' compute times.
std::vector<float> ring_round(std::vector<controller>& cs, double small, double compute,
                              std::uint32_t epoch) {
  std::vector<float> sum(controller::vote_floats, 0.0f), v(controller::vote_floats);
  for (std::size_t r = 0; r < cs.size(); ++r) {
    cs[r].cast(v, static_cast<int>(r), static_cast<int>(cs.size()), true, small, compute, epoch);
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  }
  return sum;
}

TEST(Controller, AutoBatchRisesWithTheNoiseScaleAndEveryRankAgrees) {
  // 4 replicas of 32 (M0 = 128); compute 1 ms + 0.05 ms/sample, allreduce 4 ms: a bigger batch
  // amortises the allreduce, so it pays once the noise scale is large.
  std::vector<controller> cs(4, controller(opts(lr_rule::adascale, true)));
  auto compute = [](int b) { return 0.001 + 0.00005 * b; };
  std::vector<int> batches;
  double t = 0;
  std::uint32_t epoch = 0;
  for (int step = 0; step < 3000; ++step) {
    // The noise scale grows: |G|^2 falls from 4 to 0.01 while tr(Sigma) stays 256.
    const double g2 = 4.0 * std::pow(0.0025, step / 3000.0), tr = 256;
    const int b = cs[0].batch().atomic, accum = cs[0].batch().accum;
    const double small = g2 + tr / b, big = g2 + tr / (4.0 * b * (accum + 1));
    if (step % 300 == 299) ++epoch;
    auto sum = ring_round(cs, small, compute(b), epoch);
    const double step_s = (accum + 1) * compute(b) + 0.004;
    t += step_s;
    for (std::size_t r = 0; r < cs.size(); ++r) {
      cs[r].read(sum, static_cast<int>(r), 4, 1, big, 1.0, 4.0 * b * (accum + 1), false, t);
      cs[r].step_done(step_s, true);
    }
    for (std::size_t r = 1; r < cs.size(); ++r) ASSERT_EQ(cs[r].batch(), cs[0].batch()) << "step " << step;
    if (batches.empty() || batches.back() != cs[0].batch().local()) batches.push_back(cs[0].batch().local());
  }
  ASSERT_GE(batches.size(), 2u) << "the batch never changed";
  for (std::size_t i = 1; i < batches.size(); ++i) EXPECT_GT(batches[i], batches[i - 1]);
  auto rep = cs[0].report();
  EXPECT_GE(rep.choice, 1u);
  EXPECT_GT(rep.choice_predicted, rep.choice_before * 1.05 - 1e-9);
  EXPECT_GT(rep.choice_measured, 0.0);
  EXPECT_GT(rep.batch, 128u);
  EXPECT_LE(rep.batch, 16u * 128u);
}

// The first batch choice waits while |G|^2 sits at its floor 0 (every batch's efficiency 1: the choice
// would be max_batch on the estimate's early noise alone): it comes once the gradient shows, or after
// 4 x warm_rounds (40 here) when it never does.
TEST(Controller, TheFirstChoiceWaitsWhileTheGradientIsHidden) {
  for (int hidden : {30, 1000}) {
    std::vector<controller> cs(4, controller(opts(lr_rule::adascale, true)));  // warm_rounds 10
    auto compute = [](int b) { return 0.001 + 0.00005 * b; };
    double t = 0;
    int chosen_at = -1;
    double sqr_at_choice = 0;
    for (int step = 0; step < 200 && chosen_at < 0; ++step) {
      const int b = cs[0].batch().atomic;
      const double tr = 256;
      // Hidden: |mean g|^2 below its share of the noise, so each round's |G|^2 estimate is negative.
      const double small = step < hidden ? tr / b : 1.0 + tr / b;
      const double big = step < hidden ? 0.9 * small / 4 : 1.0 + tr / (4.0 * b);
      auto sum = ring_round(cs, small, compute(b), 0);
      const double step_s = compute(b) + 0.004;
      t += step_s;
      for (std::size_t r = 0; r < cs.size(); ++r) {
        cs[r].read(sum, static_cast<int>(r), 4, 1, big, 1.0, 4.0 * b, false, t);
        cs[r].step_done(step_s, true);
      }
      if (cs[0].report().choice >= 1) {
        chosen_at = step;
        sqr_at_choice = cs[0].noise().sqr();
      }
    }
    std::printf("hidden for %d rounds: first choice at step %d, |G|^2 %.3f\n", hidden, chosen_at,
                sqr_at_choice);
    ASSERT_GE(chosen_at, 0) << "no choice in 200 rounds";
    if (hidden == 30) {
      EXPECT_GT(chosen_at, hidden) << "chosen while the gradient was hidden";
      EXPECT_GT(sqr_at_choice, 0.0);
    } else {
      EXPECT_GE(chosen_at, 39) << "chosen before 4 x warm_rounds";
      EXPECT_LE(chosen_at, 41);
      EXPECT_EQ(sqr_at_choice, 0.0);
    }
  }
}

// batch = "global": M0 = 128 (4 replicas of 32) whatever the ring's size. A ring of 2 cuts 64 each,
// of 3 ceil(128 / 3) = 43, a lone replica all 128 (in micro-batches of at most max_atomic); every
// rank adopts rank 0's word, and the learning rate's scale stays 1 (linear: factor ~1).
TEST(Controller, GlobalBatchStaysTheJobFilesAtEveryRingSize) {
  auto o = opts(lr_rule::linear, false);
  o.global_batch = true;
  o.limits.max_atomic = 50;
  EXPECT_EQ(controller(o).global_share(4), (batch_config{32, 0}));
  EXPECT_EQ(controller(o).global_share(2), (batch_config{32, 1}));  // 64 in 2 micro-batches of <= 50
  EXPECT_EQ(controller(o).global_share(3), (batch_config{43, 0}));
  EXPECT_EQ(controller(o).global_share(1), (batch_config{43, 2}));  // 3 micro-batches of <= 50
  o.limits.max_atomic = 1024;
  for (int ranks : {2, 3, 8}) {
    std::vector<controller> cs(static_cast<std::size_t>(ranks), controller(o));
    double t = 0;
    for (int step = 0; step < 3; ++step) {
      auto sum = ring_round(cs, 1.0, 0.001, 0);
      t += 0.01;
      for (int r = 0; r < ranks; ++r) {
        auto round = cs[static_cast<std::size_t>(r)].read(sum, r, ranks, 1, 0.5, 1.0, 128, step == 0, t);
        if (step == 2) {
          EXPECT_NEAR(round.lr_factor, 1.0, 0.05) << ranks << " ranks";
        }
      }
    }
    const int local = (128 + ranks - 1) / ranks;
    for (const auto& c : cs) EXPECT_EQ(c.batch(), (batch_config{local, 0})) << ranks << " ranks";
  }
  // Alone: the step after the ring shrank to one replica cuts the whole batch.
  controller alone(o);
  alone.alone(true, std::nullopt, 0, false, 0.001, 1.0, 32, 0, true, 0.01);
  EXPECT_EQ(alone.batch(), (batch_config{128, 0}));
  EXPECT_EQ(controller(opts(lr_rule::none, false)).global_share(2), (batch_config{64, 0}));
}

// A share is limits.min_atomic rows at the least (allreduce's 2): a ring of more replicas than M0 has
// rows shared it one row each (ceil(2 / 3)), and "auto" shrinking a ring's batch into max_batch took it
// down to floor(8 / 5) = 1; a batch norm module failed every step there.
TEST(Controller, AShareIsMinAtomicRowsAtTheLeast) {
  auto o = opts(lr_rule::none, false, 2);
  o.global_batch = true;
  o.limits.max_atomic = 2;
  o.limits.min_atomic = 2;
  EXPECT_EQ(controller(o).global_share(1), (batch_config{2, 0}));
  EXPECT_EQ(controller(o).global_share(2), (batch_config{2, 0}));  // 1 each before
  EXPECT_EQ(controller(o).global_share(3), (batch_config{2, 0}));
  EXPECT_EQ(controller(o).share(8, 5, false), (batch_config{2, 0}));
  o.limits.max_atomic = 3;
  EXPECT_EQ(controller(o).share(5, 1, true), (batch_config{3, 1}));  // micro-batches of 3 and 2: >= 2
  o.limits.min_atomic = 1;                                           // a batch_size of 1
  EXPECT_EQ(controller(o).global_share(3), (batch_config{1, 0}));
}

// With estimate_every = 4 every rank computes the norms on the same rounds (rank 0's word): 0, 4, 8...
// A rank that joins with its own count (a fresh controller says "due" at once) makes that round count
// for nothing and agrees from the next one.
TEST(Controller, NormsOnOneRoundInEveryAndEveryRankAgrees) {
  auto o = opts(lr_rule::adascale, false);
  o.estimate_every = 4;
  std::vector<controller> cs(3, controller(o));
  std::vector<int> due_rounds;
  for (int round = 0; round < 24; ++round) {
    if (round == 10) {  // joins with the most trained replica's state, due by its own (fresh) count
      std::vector<float> st(controller::sync_floats);
      cs[0].pack(st);
      cs.emplace_back(o);
      cs.back().unpack(st);
    }
    const std::uint64_t before = cs[0].noise().rounds();
    std::vector<float> sum(controller::vote_floats, 0.0f), v(controller::vote_floats);
    const int n = static_cast<int>(cs.size());
    for (int r = 0; r < n; ++r) {
      auto& c = cs[static_cast<std::size_t>(r)];
      c.cast(v, r, n, true, c.norms_due() ? std::optional<double>(20.0) : std::nullopt, 0.01, 0);
      for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
    if (cs[0].norms_due()) due_rounds.push_back(round);
    for (int r = 0; r < n; ++r)
      cs[static_cast<std::size_t>(r)].read(sum, r, n, 1, 12.0, 1.0, 32.0 * n, false, round);
    if (round == 10) {
      EXPECT_EQ(cs[0].noise().rounds(), before) << "the joining rank's lone norms counted";
    }
    for (const auto& c : cs) EXPECT_EQ(c.noise().rounds(), cs[0].noise().rounds()) << "round " << round;
    for (const auto& c : cs) EXPECT_EQ(c.norms_due(), cs[0].norms_due()) << "after round " << round;
  }
  EXPECT_EQ(due_rounds, (std::vector<int>{0, 4, 8, 12, 16, 20}));
  EXPECT_EQ(cs[0].noise().rounds(), 6u);

  // Alone: the norms on steps 0, 4, 8 (a pair with the step before: step 0 has none, so step 1,
  // the step after a due one that added nothing, computes them again).
  controller alone(o);
  std::vector<int> due;
  for (int step = 0; step < 12; ++step) {
    const bool pair = alone.norms_due() && step > 0;
    if (alone.norms_due()) due.push_back(step);
    alone.alone(true, pair ? std::optional<double>(20.0) : std::nullopt, 12.0, pair, 0.01, 1.0, 32, 0, false,
                step);
  }
  EXPECT_EQ(due, (std::vector<int>{0, 1, 4, 8}));
  EXPECT_EQ(alone.noise().rounds(), 3u);
}

// A due round that adds nothing (a rank's batch short of the full size) is tried again two rounds on
// (rank 0's word for the round after next): a task's batches that repeat with the period of the
// norms cannot hide every due round. Here every 4th round is short, as 2,000-record tasks cut in
// 512s are, and falls on every due round of 1 in 8: before, the estimate never had a round.
TEST(Controller, ADueRoundThatAddsNothingIsTriedAgain) {
  auto o = opts(lr_rule::adascale, false);
  o.estimate_every = 8;
  std::vector<controller> cs(2, controller(o));
  std::vector<int> due;
  for (int round = 0; round < 64; ++round) {
    const bool full = round % 4 != 0;
    std::vector<float> sum(controller::vote_floats, 0.0f), v(controller::vote_floats);
    for (int r = 0; r < 2; ++r) {
      auto& c = cs[static_cast<std::size_t>(r)];
      c.cast(v, r, 2, full, c.norms_due() ? std::optional<double>(20.0) : std::nullopt, 0.01, 0);
      for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
    if (cs[0].norms_due()) due.push_back(round);
    for (int r = 0; r < 2; ++r)
      cs[static_cast<std::size_t>(r)].read(sum, r, 2, 1, 12.0, 1.0, full ? 64.0 : 50.0, false, round);
    EXPECT_EQ(cs[1].norms_due(), cs[0].norms_due()) << "after round " << round;
  }
  std::vector<int> want;
  for (int k = 0; k < 64; k += 8) want.insert(want.end(), {k, k + 2});
  EXPECT_EQ(due, want);
  EXPECT_EQ(cs[0].noise().rounds(), 8u) << "one estimate per 8 rounds, each on the retry";
  EXPECT_EQ(cs[1].noise().rounds(), 8u);
}

TEST(Controller, StateTravelsWithAResync) {
  std::vector<controller> cs(2, controller(opts(lr_rule::adascale, true)));
  for (int i = 0; i < 50; ++i) {
    auto sum = ring_round(cs, 10.0 + i % 3, 0.002, 0);
    for (std::size_t r = 0; r < cs.size(); ++r) {
      cs[r].read(sum, static_cast<int>(r), 2, 1, 5.0, 1.0, 64, false, i * 0.01);
      cs[r].step_done(0.005, true);
    }
  }
  std::vector<float> st(controller::sync_floats);
  cs[0].pack(st);
  controller fresh(opts(lr_rule::adascale, true));
  fresh.unpack(st);
  EXPECT_EQ(fresh.noise().rounds(), cs[0].noise().rounds());
  EXPECT_EQ(fresh.batch(), cs[0].batch());
  EXPECT_NEAR(fresh.report().progress, cs[0].report().progress, 1e-3);
}

// A job resumed after its job.toml went from batch = "auto" to a fixed batch: the restored state's
// chosen batch is not taken (the workers cut batch_size rows, every round looked short against the
// kept batch, and the learning rate was cut under lr_scaling = "none"); the estimates are.
TEST(Controller, AFixedBatchControllerKeepsItsBatchFromAnAutoBatchsState) {
  controller chosen(opts(lr_rule::adascale, true));
  std::vector<float> st(controller::sync_floats);
  chosen.pack(st);
  st[noise_scale::state_floats + 1] = 60;  // the batch it chose: 60 x 2
  st[noise_scale::state_floats + 2] = 1;
  controller autob(opts(lr_rule::adascale, true)), fixed(opts(lr_rule::none, false));
  autob.unpack(st);
  fixed.unpack(st);
  EXPECT_EQ(autob.batch(), (batch_config{60, 1}));
  EXPECT_EQ(fixed.batch(), (batch_config{32, 0})) << "the job file's batch_size";
}

// A ring shrunk below M0 by a resize (4 x 32 = M0 128, then 1 x 32): the batch chosen again is at
// least M0 though the kept one's goodput looks higher (its efficiency is above 1 below M0: with a
// small noise scale 1 x 32 promised 4x M0's efficiency and stayed to the job's end).
TEST(Controller, ARingShrunkBelowM0ChoosesABatchOfAtLeastM0) {
  std::vector<controller> cs(4, controller(opts(lr_rule::adascale, true)));
  auto compute = [](int b) { return 0.001 + 0.00005 * b; };
  double t = 0;
  for (int step = 0; step < 60; ++step) {  // |G|^2 large: noise scale ~2, M0 is the best
    const int b = cs[0].batch().atomic, accum = cs[0].batch().accum;
    const double g2 = 100, tr = 256, small = g2 + tr / b, big = g2 + tr / (4.0 * b * (accum + 1));
    auto sum = ring_round(cs, small, compute(b), 0);
    const double step_s = (accum + 1) * compute(b) + 0.004;
    t += step_s;
    for (std::size_t r = 0; r < cs.size(); ++r) {
      cs[r].read(sum, static_cast<int>(r), 4, 1, big, 1.0, 4.0 * b * (accum + 1), false, t);
      cs[r].step_done(step_s, true);
    }
  }
  ASSERT_EQ(4 * cs[0].batch().local(), 128) << "the ring of 4 keeps M0";
  std::vector<controller> one(1, cs[0]);  // the resize: rank 0 alone
  for (int step = 0; step < 5; ++step) {
    const int b = one[0].batch().atomic;
    auto sum = ring_round(one, 100 + 256.0 / b, compute(b), 0);
    t += compute(b);
    one[0].read(sum, 0, 1, 1, 100 + 256.0 / b, 1.0, b, step == 0, t);
    one[0].step_done(compute(b), true);
  }
  EXPECT_GE(one[0].batch().local(), 128) << one[0].batch().atomic << " x " << one[0].batch().accum + 1;
}

// A ring that passes through a ring of one (a death, a shrink) and grows again chooses its batch and
// scales its rate on the estimate it had, not on the first rounds after the resize: with the averages
// started over at each switch of kind, a ring's first round after a lone replica's pairs (|G|^2 at
// its floor 0: an "infinite" noise scale) chose max_batch (16 x M0) and scaled the rate x16.
TEST(Controller, AResizeThroughARingOfOneKeepsTheEstimateItsChoiceAndRateUse) {
  auto o = opts(lr_rule::adascale, true);
  o.batch_size = 64;  // 2 workers of 64: alone, M0 is one micro-batch (2 x 64 trusted), so it pairs steps
  std::vector<controller> cs(2, controller(o));
  auto compute = [](int b) { return 0.001 + 0.00005 * b; };
  const double g2 = 100, tr = 256;
  double t = 0;
  auto ring_steps = [&](int steps, bool hidden_first) {
    for (int step = 0; step < steps; ++step) {
      const int b = cs[0].batch().atomic, accum = cs[0].batch().accum;
      const int n = static_cast<int>(cs.size());
      const double small = g2 + tr / b;
      // The first rounds after the resize: |mean g|^2 below its share of the noise (|G|^2 hidden).
      const double big = hidden_first && step < 3 ? 0.9 * small / n : g2 + tr / (n * b * (accum + 1.0));
      auto sum = ring_round(cs, small, compute(b), 0);
      const double step_s = (accum + 1) * compute(b) + 0.004;
      t += step_s;
      for (std::size_t r = 0; r < cs.size(); ++r) {
        auto got =
            cs[r].read(sum, static_cast<int>(r), n, 1, big, 1.0, 1.0 * n * b * (accum + 1), step == 0, t);
        cs[r].step_done(step_s, true);
        if (hidden_first) {
          EXPECT_LT(got.lr_factor, 2.0) << "step " << step;
        }
      }
      if (hidden_first && step > 0) {  // step 0 ran the batch of the ring before (its word comes next round)
        EXPECT_EQ(n * cs[0].batch().local(), 128)
            << "step " << step << ": noise scale ~2.6, M0 is still the best";
      }
    }
  };
  ring_steps(200, false);
  ASSERT_EQ(2 * cs[0].batch().local(), 128) << "noise scale ~2.6: M0 is the best";
  std::vector<controller> one(1, cs[0]);  // a worker died: rank 0 alone, pairing its steps
  for (int step = 0; step < 5; ++step) {
    const int b = one[0].batch().atomic;
    const double small = tr / b;  // the pairs hide |G|^2 too
    auto got =
        one[0].alone(true, small, 0.4 * small, step > 0, compute(b), 1.0, b, 0, step == 0, t += compute(b));
    one[0].step_done(compute(b), true);
    EXPECT_LT(got.lr_factor, 2.0) << "alone, step " << step;
  }
  ASSERT_EQ(one[0].batch().accum, 0) << "alone at M0 in one micro-batch: the estimate pairs steps";
  cs.assign(2, one[0]);  // replaced: the ring of 2 again, both ranks resynced from rank 0
  ring_steps(10, true);
}

// Past max_batch after a resize with no usable estimate yet (before the first choice): the batch
// goes back to the nearest in range at once, each of the ring's replicas floor(max_batch / ranks).
TEST(Controller, AResizePastMaxBatchBeforeAnyEstimateIsBroughtBackInRange) {
  auto o = opts(lr_rule::adascale, true);
  o.limits.max_batch = 256;  // M0 = 128: 4 x 32
  std::vector<controller> cs(16, controller(o));
  const int b = cs[0].batch().atomic;
  ASSERT_EQ(b, 32);
  auto sum = ring_round(cs, 10, 0.002, 0);
  for (std::size_t r = 0; r < cs.size(); ++r)
    cs[r].read(sum, static_cast<int>(r), 16, 1, 9, 1.0, 16.0 * b, true, 1.0);
  sum = ring_round(cs, 10, 0.002, 0);  // the next round carries rank 0's word
  for (std::size_t r = 0; r < cs.size(); ++r)
    cs[r].read(sum, static_cast<int>(r), 16, 1, 9, 1.0, 16.0 * b, false, 1.1);
  for (const auto& c : cs)
    EXPECT_EQ(16 * c.batch().local(), 256) << c.batch().atomic << " x " << c.batch().accum + 1;
}

// A job whose ring starts on one worker (1 x 32 below M0 = 4 x 32: lifted to 1 x 128) and grows to
// four before any estimate is usable trains M0 again, 4 x 32, not 4 x 128: the lift stood in for the
// job file's batch. Before 2026-12-07 it kept 512 until a choice beat it by min_gain, which in a short
// job often never came (goodput_job.auto_batch_rises_as_the_noise_scale_grows failed 1 run in 3).
TEST(Controller, ABatchLiftedToM0BeforeAnyChoiceIsSharedAnewWhenTheRingGrows) {
  auto o = opts(lr_rule::adascale, true);
  std::vector<controller> one(1, controller(o));
  ASSERT_EQ(one[0].batch().local(), 32);
  auto rounds = [](std::vector<controller>& cs, bool fresh, double t) {
    const int n = static_cast<int>(cs.size());
    for (int i = 0; i < 2; ++i) {  // the second round carries rank 0's word
      auto sum = ring_round(cs, 10, 0.002, 0);
      for (std::size_t r = 0; r < cs.size(); ++r)
        cs[r].read(sum, static_cast<int>(r), n, 1, 9, 1.0, 1.0 * n * cs[r].batch().local(), fresh && i == 0,
                   t + i * 0.1);
    }
  };
  rounds(one, true, 1.0);
  ASSERT_EQ(one[0].batch().local(), 128) << "alone below M0: lifted to it";
  std::vector<controller> four(4, one[0]);  // three joined, resynced from rank 0
  rounds(four, true, 2.0);
  for (const auto& c : four)
    EXPECT_EQ(4 * c.batch().local(), 128) << c.batch().atomic << " x " << c.batch().accum + 1;
}

// A ring's estimates become those of the preconditioned norms once (they start over); a rank that
// joins later receives them with the kind and keeps them when its own preconditioner starts.
TEST(Controller, PreconditionedEstimatesStartOverOnceAndTravelWithTheirKind) {
  controller c(opts(lr_rule::adascale, true));
  std::vector<controller> cs(2, c);
  auto rounds = [&cs](int from, int n) {
    for (int i = from; i < from + n; ++i) {
      auto sum = ring_round(cs, 10.0, 0.002, 0);
      for (std::size_t r = 0; r < cs.size(); ++r) {
        cs[r].read(sum, static_cast<int>(r), 2, 1, 5.0, 1.0, 64, false, i * 0.01);
        cs[r].step_done(0.005, true);
      }
    }
  };
  rounds(0, 20);
  ASSERT_EQ(cs[0].noise().rounds(), 20u);
  for (auto& x : cs) x.norms_preconditioned();
  EXPECT_EQ(cs[0].noise().rounds(), 0u) << "plain estimates kept under preconditioned norms";
  rounds(20, 10);
  for (auto& x : cs) x.norms_preconditioned();  // a refresh: the same kind
  EXPECT_EQ(cs[0].noise().rounds(), 10u);
  std::vector<float> st(controller::sync_floats);
  cs[0].pack(st);
  controller joined(opts(lr_rule::adascale, true));
  joined.unpack(st);
  joined.norms_preconditioned();  // its own preconditioner's first weights
  EXPECT_EQ(joined.noise().rounds(), 10u) << "the joining rank dropped the ring's estimates";
  EXPECT_NEAR(joined.report().grad_sqr, cs[0].report().grad_sqr, 1e-6 * cs[0].report().grad_sqr);
}

TEST(GradNorms, FusedLoopsAndThePreconditioner) {
  std::vector<float> g{1, -2, 3, 0.5f, 0, 4, -1, 2, 9}, buf(9), out(9), w(9, 0.25f);
  double n1 = weigh_into(buf, g, 2.0f, true, {});
  EXPECT_NEAR(n1, 1 + 4 + 9 + 0.25 + 16 + 1 + 4 + 81, 1e-5);
  EXPECT_FLOAT_EQ(buf[2], 6.0f);
  weigh_into(buf, g, 2.0f, false, {});
  double n2 = average_out(out, buf, 4.0f, w);
  EXPECT_FLOAT_EQ(out[2], 3.0f);
  EXPECT_NEAR(n2, 0.25 * n1, 1e-5);
  std::vector<float> prev(9, 1.0f);
  double p = pair_sqr_and_keep(g, prev, {});
  double want = 0;
  for (float x : g) want += 0.25 * (x + 1) * (x + 1);
  EXPECT_NEAR(p, want, 1e-5);
  EXPECT_EQ(prev, g);

  // A ring of one's pair in one pass, over more than one block and a tail, weighted: buf holds
  // 3 g' (the previous step's sum of 3 rows) and becomes 2 g.
  const std::size_t n = 4096 + 37;
  std::vector<float> a(n), b(n), sum(n), wn(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = std::sin(0.1f * static_cast<float>(i));
    b[i] = std::cos(0.07f * static_cast<float>(i));
    wn[i] = 0.5f + static_cast<float>(i % 7);
    sum[i] = 3.0f * b[i];
  }
  auto pn = weigh_pair_into(sum, a, 2.0f, 3.0f, wn);
  double sa = 0, sb = 0, ab = 0, half = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sa += double(a[i]) * a[i] * wn[i];
    sb += double(b[i]) * b[i] * wn[i];
    ab += double(a[i]) * b[i] * wn[i];
    half += 0.25 * (double(a[i]) + b[i]) * (double(a[i]) + b[i]) * wn[i];
  }
  EXPECT_NEAR(pn.sqr, sa, 1e-4 * sa);
  EXPECT_NEAR(pn.prev_sqr, sb, 1e-4 * sb);
  EXPECT_NEAR(pn.cross, ab, 1e-4 * std::abs(ab) + 1e-3);
  EXPECT_NEAR(pn.big(), half, 1e-4 * half);
  EXPECT_NEAR(pn.small(), 0.5 * (sa + sb), 1e-4 * (sa + sb));
  EXPECT_FLOAT_EQ(sum[100], 2.0f * a[100]);
  EXPECT_FLOAT_EQ(sum[n - 1], 2.0f * a[n - 1]);
}

// Adam's weights are floored per tensor at (1 - beta2) x its mean corrected v: a coordinate whose v is
// 0 (an input no example had lit) weighs 1 / ((1 - beta2) mean) as Adam bounds its own step, not
// 1 / eps^2; the others keep Adam's 1 / (sqrt(v c) + eps)^2, over more than one block and a tail.
TEST(GradNorms, AdamsWeightsAreBoundedAsAdamBoundsItsStep) {
  const std::size_t n = 4096 + 37;
  const double beta2 = 0.999;
  const float eps = 1e-7f, c = adam_inv_correction(beta2, 50);
  std::vector<float> v(n), w(n);
  double mean = 0;
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = i % 100 == 7 ? 0.0f : 1e-4f * (1.0f + static_cast<float>(i % 13));
    mean += static_cast<double>(v[i]) * c / static_cast<double>(n);
  }
  const float floor = adam_floor(v, c, beta2);
  EXPECT_NEAR(floor, (1 - beta2) * mean, 1e-5 * (1 - beta2) * mean);
  EXPECT_EQ(adam_floor({}, c, beta2), 0.0f);
  goodput::adam_weights(w, v, c, eps, floor);
  for (std::size_t i = 0; i < n; ++i) {
    const double p = std::sqrt(std::max(static_cast<double>(v[i]) * c, (1 - beta2) * mean)) + eps;
    ASSERT_NEAR(w[i], 1.0 / (p * p), 1e-5 / (p * p)) << i;
  }
  EXPECT_LT(w[7], 1.0 / ((1 - beta2) * mean) * (1 + 1e-5)) << "an unlit coordinate's weight, unbounded: 1e14";
  EXPECT_GT(w[7], 100 * w[8]);                // still the largest: Adam steps far on it
  goodput::adam_weights(w, v, c, eps, 0.0f);  // no floor: Adam's weights as they are
  EXPECT_NEAR(w[7], 1.0 / (eps * eps), 1e-3 / (eps * eps));
}

// ---- the allreduce strategy on an in-process ring, with a backend of known gradient statistics ----

using testing::rank_ring;
using testing::shared_ring;

struct no_ps final : ps_client {
  expected<void> pull(trainer_backend&, const nn::batch&) override { return {}; }
  expected<void> push(trainer_backend&, std::size_t) override { return {}; }
};

// A batch of n samples' mean gradient, each sample's G + z, z ~ N(0, diag(sigma^2)).
void draw_gradient(const synthetic& s, std::mt19937_64& rng, std::size_t n, std::span<float> out) {
  std::normal_distribution<double> z;
  std::vector<double> mean(s.g.size(), 0.0);
  for (std::size_t k = 0; k < n; ++k)
    for (std::size_t j = 0; j < mean.size(); ++j) mean[j] += (s.g[j] + s.sigma[j] * z(rng)) / n;
  for (std::size_t j = 0; j < mean.size(); ++j) out[j] = static_cast<float>(mean[j]);
}

// Each sample's gradient is G + z, z ~ N(0, diag(sigma^2)), whatever the parameters: a batch's is
// their mean. The optimizer is plain SGD (Adam's slots when s.adam_v is set, never stepped);
// apply_gradients records the learning-rate scale.
class synthetic_backend final : public trainer_backend {
 public:
  synthetic_backend(const synthetic& s, std::uint64_t seed) : s_(s), rng_(seed) {
    const std::size_t d = s.g.size();
    params_.assign(d, 0.0f);
    grads_.assign(d, 0.0f);
    layout_ = {{"w", 0, d}};
    state_.resize(1);
    nn::optimizer_config oc;
    if (!s.adam_v.empty()) {  // Adam's slots: first moments (unused here), then the second
      oc.type = "adam";
      state_[0].values.assign(2 * d, 0.0f);
      std::copy(s.adam_v.begin(), s.adam_v.end(), state_[0].values.begin() + static_cast<std::ptrdiff_t>(d));
      state_[0].step = synthetic::adam_step;
    }
    auto o = nn::make_optimizer(oc);
    opt_ = std::move(*o);
  }
  std::string_view name() const override { return "synthetic"; }
  expected<float> compute_gradients(const nn::batch& b) override {
    draw_gradient(s_, rng_, b.size(), grads_);
    return 1.0f;
  }
  void apply_gradients(double lr_scale) override { scales.push_back(lr_scale); }
  std::span<float> parameters() override { return params_; }
  std::span<float> gradients() override { return grads_; }
  const std::vector<param_slice>& layout() const override { return layout_; }
  const std::vector<nn::dense_param*>& dense_parameters() override { return dense_; }
  const nn::optimizer& optimizer() const override { return *opt_; }
  std::vector<nn::dense_slots>& optimizer_state() override { return state_; }
  std::vector<std::uint64_t> batch_ids(const nn::batch&, std::size_t) override { return {}; }
  expected<float> predict(const nn::batch&) override { return 0.0f; }
  std::span<const float> probabilities() const override { return {}; }
  std::size_t output_width() const override { return 1; }

  std::vector<double> scales;

 private:
  const synthetic& s_;
  std::mt19937_64 rng_;
  std::vector<float> params_, grads_;
  std::vector<param_slice> layout_;
  std::vector<nn::dense_param*> dense_;
  std::vector<nn::dense_slots> state_;
  std::unique_ptr<nn::optimizer> opt_;
};

// The same gradients on the allreduce strategy's device path: a gpu::device_trainer whose "device"
// buffers are host memory (the ops are fakes::host_grad_ops), inside the CUDA backend.
class synthetic_device_trainer final : public gpu::device_trainer {
 public:
  synthetic_device_trainer(const synthetic& s, std::uint64_t seed, std::vector<double>& scales)
      : s_(s), rng_(seed), scales_(scales), params_(s.g.size(), 0.0f), grads_(s.g.size(), 0.0f) {}
  using gpu::device_trainer::compute_gradients;
  expected<float> compute_gradients(const nn::batch& b, const std::function<void()>& queue_more) override {
    draw_gradient(s_, rng_, b.size(), grads_);
    if (queue_more) queue_more();
    return 1.0f;
  }
  float* params() override { return params_.data(); }
  float* grads() override { return grads_.data(); }
  std::size_t dense_count() const override { return grads_.size(); }
  void apply_gradients(double lr_scale) override { scales_.push_back(lr_scale); }
  expected<void> download(nn::model&) override { return {}; }
  expected<void> upload(const nn::model&) override { return {}; }
  std::size_t slot_count() const override { return 0; }
  second_moments adam_moments() const override {
    if (s_.adam_v.empty()) return {};
    return {s_.adam_v.data(), synthetic::adam_step};
  }
  expected<void> download_optimizer(std::span<float>, std::uint64_t& step) override {
    step = 0;
    return {};
  }
  expected<void> upload_optimizer(std::span<const float>, std::uint64_t) override { return {}; }
  gpu::cuda_stream stream() const override { return nullptr; }
  expected<void> sync() override { return {}; }
  int device() const override { return 0; }

 private:
  const synthetic& s_;
  std::mt19937_64 rng_;
  std::vector<double>& scales_;
  std::vector<float> params_, grads_;
};

// A CUDA backend around synthetic_device_trainer; its host mirror is a small MLP the fake never
// reads (resyncs broadcast it; the synthetic gradients do not depend on parameters).
struct synthetic_gpu {
  std::vector<double> scales;
  std::vector<float> staging;
  std::unique_ptr<trainer_backend> backend;
  synthetic_gpu(const synthetic& s, std::uint64_t seed, int rank, fakes::shared_rendezvous& rv,
                std::shared_ptr<fakes::host_op_counts> counts) {
    auto g = std::make_unique<gpu_replica>();
    g->device.uuid = "GPU-shared";  // one GPU for every rank: host-staged sums
    g->host = "host";
    g->self = "worker-" + std::to_string(rank);
    g->trainer = std::make_unique<synthetic_device_trainer>(s, seed, scales);
    g->port = std::make_unique<fakes::memory_port>(rv);
    staging.assign(s.g.size(), 0.0f);
    g->staging = staging;
    g->ops = fakes::host_grad_ops(std::move(counts));
    nn::dataset_info info{"tiny", 4, 0, 2, {}, 0};
    nn::model_config mc;
    mc.type = "mlp";
    mc.hidden = {2};
    auto m = nn::model_registry::instance().create(mc, info);
    EXPECT_TRUE(m) << m.err().to_string();
    const nn::train_config tc;
    auto b = cuda_backend::wrap(std::move(*m), tc, std::move(g));
    EXPECT_TRUE(b) << b.err().to_string();
    backend = std::move(*b);
  }
};

job::job_spec spec_of(std::uint32_t workers, std::size_t batch, const std::string& rule,
                      std::size_t every = 1) {
  job::job_spec spec;
  spec.nn.train.noise_scale_every = every;
  spec.job.strategy = "allreduce";
  spec.job.workers = workers;
  spec.job.records_per_task = 100000;
  spec.nn.train.batch_size = batch;
  spec.nn.train.lr_scaling = rule;
  return spec;
}

// `ranks` threads train `steps` steps each; returns every rank's report and recorded lr scales.
struct ring_run {
  std::vector<wire::goodput_report> reports;
  std::vector<std::vector<double>> scales;
};
// `device`: on the allreduce strategy's device path (synthetic_gpu), counting its ops in `counts`.
// `store`: the ring's checkpoints (every rank's ctx.store); `durable`: rank 0's
// strategy::durable_state() after the last step.
ring_run run_ring(const synthetic& s, int ranks, const job::job_spec& spec, int steps, bool device = false,
                  std::shared_ptr<fakes::host_op_counts> counts = {}, replica_store* store = nullptr,
                  std::vector<float>* durable = nullptr) {
  shared_ring ring(ranks);
  fakes::shared_rendezvous rv;
  nn::dataset data;
  data.rows = spec.nn.train.batch_size;
  ring_run out;
  out.reports.resize(static_cast<std::size_t>(ranks));
  out.scales.resize(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      const auto seed = 100 + static_cast<std::uint64_t>(r);
      synthetic_backend host(s, seed);
      std::optional<synthetic_gpu> dev;
      if (device) dev.emplace(s, seed, r, rv, r == 0 ? counts : nullptr);
      trainer_backend& be = device ? *dev->backend : static_cast<trainer_backend&>(host);
      no_ps ps;
      rank_ring rr(ring, r);
      node_id self{"worker-" + std::to_string(r), 0};
      worker_context ctx{spec, self, be, ps, rr};
      ctx.store = store;
      auto strat = make_strategy("allreduce", spec);
      ASSERT_TRUE(strat) << strat.err().to_string();
      nn::batch b(data, 0, spec.nn.train.batch_size);
      for (int i = 0; i < steps; ++i) {
        auto res = (*strat)->step(ctx, &b, false);
        ASSERT_EQ(res.what, step_result::kind::trained) << "rank " << r << " step " << i;
      }
      if (durable && r == 0) *durable = (*strat)->durable_state();
      out.reports[static_cast<std::size_t>(r)] = (*strat)->goodput();
      out.scales[static_cast<std::size_t>(r)] = device ? dev->scales : host.scales;
    });
  for (auto& t : threads) t.join();
  return out;
}

TEST(AllreduceNoiseScale, FourRanksEstimateTheKnownStatisticsInTheirAllreduce) {
  auto s = make_synthetic(256, 1.0, 256.0);
  // The job file: 2 workers of 32 (M0 = 64); the ring has 4: S = 2.
  auto run = run_ring(s, 4, spec_of(2, 32, "adascale"), 3000);
  std::printf("norms every step, 4 ranks: |G|^2 %.4f (known %.4f), tr %.1f (known %.1f)\n",
              run.reports[0].grad_sqr, s.sqr(), run.reports[0].grad_var * run.reports[0].base_batch,
              s.trace());
  for (int r = 0; r < 4; ++r) {
    const auto& g = run.reports[static_cast<std::size_t>(r)];
    ASSERT_TRUE(g.valid);
    EXPECT_EQ(g.ring_rank, static_cast<std::uint32_t>(r));
    EXPECT_NEAR(g.grad_sqr, s.sqr(), 0.05 * s.sqr()) << "rank " << r;
    EXPECT_NEAR(g.grad_var * g.base_batch, s.trace(), 0.05 * s.trace()) << "rank " << r;
    EXPECT_EQ(g.batch, 128u);
    // Every rank stepped at rank 0's gain, to the bit.
    EXPECT_EQ(run.scales[static_cast<std::size_t>(r)], run.scales[0]);
  }
  // AdaScale at S = 2: r = (var + sqr) / (var / 2 + sqr), var = tr / M0 = 4.
  const double var = s.trace() / 64, sqr = s.sqr();
  EXPECT_NEAR(run.scales[0].back(), (var + sqr) / (var / 2 + sqr), 0.03);
  EXPECT_NEAR(run.reports[0].progress, 0.0, 3000 * 2.0);
  EXPECT_GT(run.reports[0].progress, 3000 * 1.0);
}

// The default: the norms on 1 step in 8, each estimate standing for 8 rounds in the averages.
TEST(AllreduceNoiseScale, NormsOnEveryEighthStepEstimateTheKnownStatistics) {
  auto s = make_synthetic(256, 1.0, 256.0);
  auto run = run_ring(s, 4, spec_of(2, 32, "adascale", 8), 6000);
  for (int r = 0; r < 4; ++r) {
    const auto& g = run.reports[static_cast<std::size_t>(r)];
    ASSERT_TRUE(g.valid);
    EXPECT_NEAR(g.grad_sqr, s.sqr(), 0.05 * s.sqr()) << "rank " << r;
    EXPECT_NEAR(g.grad_var * g.base_batch, s.trace(), 0.05 * s.trace()) << "rank " << r;
    EXPECT_EQ(run.scales[static_cast<std::size_t>(r)], run.scales[0]);
  }
  std::printf("norms every 8th step, 4 ranks: |G|^2 %.4f (known %.4f), tr %.1f (known %.1f)\n",
              run.reports[0].grad_sqr, s.sqr(), run.reports[0].grad_var * run.reports[0].base_batch,
              s.trace());
  auto one = run_ring(s, 1, spec_of(1, 32, "none", 8), 12000);
  std::printf("norms every 8th step, alone: |G|^2 %.4f (known %.4f), tr %.1f (known %.1f)\n",
              one.reports[0].grad_sqr, s.sqr(), one.reports[0].grad_var * one.reports[0].base_batch,
              s.trace());
  EXPECT_NEAR(one.reports[0].grad_sqr, s.sqr(), 0.05 * s.sqr());
  EXPECT_NEAR(one.reports[0].grad_var * one.reports[0].base_batch, s.trace(), 0.05 * s.trace());
}

TEST(AllreduceNoiseScale, ARingOfOneEstimatesFromConsecutiveSteps) {
  auto s = make_synthetic(256, 1.0, 256.0);
  auto run = run_ring(s, 1, spec_of(1, 32, "none"), 6000);
  const auto& g = run.reports[0];
  ASSERT_TRUE(g.valid);
  EXPECT_NEAR(g.grad_sqr, s.sqr(), 0.05 * s.sqr());
  EXPECT_NEAR(g.grad_var * g.base_batch, s.trace(), 0.05 * s.trace());
  for (double x : run.scales[0]) ASSERT_DOUBLE_EQ(x, 1.0);  // lr_scaling "none", full batches
}

// A ring checkpoint as the strategies see it: restores nothing into the replica (the synthetic
// gradients do not depend on it) and hands back `kept` as the strategy's state.
struct kept_store final : replica_store {
  std::vector<float> kept;
  std::atomic<int> restores{0};
  expected<std::optional<std::uint64_t>> restore_latest(trainer_backend&,
                                                        std::vector<float>* strategy_state) override {
    ++restores;
    if (strategy_state) *strategy_state = kept;
    return std::optional<std::uint64_t>(0);
  }
};

// A job resumed from a ring checkpoint goes on with the goodput controller the checkpoint kept
// (strategy::durable_state(): its estimate, progress, batch), on the CPU path and on the device's:
// the resumed ring's first step reports the kept pairs and progress, one more round on; a kept state
// of another size is not taken (the controller starts over).
TEST(AllreduceNoiseScale, AResumedRingGoesOnWithTheControllerItsCheckpointKept) {
  auto s = make_synthetic(256, 1.0, 256.0);
  const auto spec = spec_of(2, 32, "adascale");
  for (bool device : {false, true}) {
    kept_store store;
    auto before = run_ring(s, 2, spec, 400, device, {}, nullptr, &store.kept);
    ASSERT_FALSE(store.kept.empty());
    const auto& was = before.reports[0];
    ASSERT_GT(was.rounds, 300u);
    auto after = run_ring(s, 2, spec, 1, device, {}, &store);
    EXPECT_EQ(store.restores.load(), 1) << "the source of the resumed ring's sync restores, once";
    for (const auto& now : after.reports) {
      EXPECT_EQ(now.rounds, was.rounds + 1) << (device ? "device" : "cpu");
      EXPECT_GT(now.progress, was.progress) << (device ? "device" : "cpu");
      EXPECT_LT(now.progress, was.progress + 3) << (device ? "device" : "cpu");
      EXPECT_NEAR(now.grad_sqr, was.grad_sqr, 0.05 * was.grad_sqr) << (device ? "device" : "cpu");
    }
    store.kept.pop_back();
    store.restores = 0;
    auto fresh = run_ring(s, 2, spec, 1, device, {}, &store);
    EXPECT_EQ(store.restores.load(), 1);
    EXPECT_EQ(fresh.reports[0].rounds, 1u) << "a kept state of another size is not taken";
  }
}

// ---- the device path (allreduce_gpu.cpp): the same job, the same gradients, the same figures ----

// The device path's report and learning-rate scales against the CPU path's on the same gradients:
// the norms are summed in another order (host-staged sums of n/N g instead of n g; double sums
// instead of the fused float loops), so equal to a relative 1e-4, not to the bit.
void expect_same_figures(const ring_run& gpu, const ring_run& cpu) {
  ASSERT_EQ(gpu.reports.size(), cpu.reports.size());
  for (std::size_t r = 0; r < gpu.reports.size(); ++r) {
    const auto &g = gpu.reports[r], &c = cpu.reports[r];
    ASSERT_TRUE(g.valid) << "rank " << r << ": the device path reports no estimate";
    EXPECT_EQ(g.ring_rank, c.ring_rank);
    EXPECT_EQ(g.rounds, c.rounds) << "rank " << r;
    EXPECT_EQ(g.batch, c.batch);
    EXPECT_NEAR(g.grad_sqr, c.grad_sqr, 1e-4 * c.grad_sqr) << "rank " << r;
    EXPECT_NEAR(g.grad_var, c.grad_var, 1e-4 * c.grad_var) << "rank " << r;
    EXPECT_NEAR(g.noise_scale, c.noise_scale, 1e-4 * c.noise_scale) << "rank " << r;
    EXPECT_NEAR(g.progress, c.progress, 1e-4 * c.progress) << "rank " << r;
    ASSERT_EQ(gpu.scales[r].size(), cpu.scales[r].size()) << "rank " << r;
    for (std::size_t i = 0; i < gpu.scales[r].size(); ++i)
      ASSERT_NEAR(gpu.scales[r][i], cpu.scales[r][i], 1e-4 * cpu.scales[r][i])
          << "rank " << r << " step " << i;
    EXPECT_EQ(gpu.scales[r], gpu.scales[0]) << "rank " << r << " stepped at another rate than rank 0";
  }
}

TEST(GpuAllreduceNoiseScale, FourRanksEstimateWhatTheCpuPathDoesAndScaleTheirLearningRate) {
  auto s = make_synthetic(256, 1.0, 256.0);
  const auto spec = spec_of(2, 32, "adascale");  // M0 = 64, 4 ranks of 32: S = 2
  auto cpu = run_ring(s, 4, spec, 3000);
  auto gpu = run_ring(s, 4, spec, 3000, true);
  std::printf(
      "device path, norms every step, 4 ranks: |G|^2 %.4f (cpu %.4f, known %.4f), tr %.1f (cpu %.1f, "
      "known %.1f), last lr scale %.4f (cpu %.4f)\n",
      gpu.reports[0].grad_sqr, cpu.reports[0].grad_sqr, s.sqr(),
      gpu.reports[0].grad_var * gpu.reports[0].base_batch,
      cpu.reports[0].grad_var * cpu.reports[0].base_batch, s.trace(), gpu.scales[0].back(),
      cpu.scales[0].back());
  expect_same_figures(gpu, cpu);
  EXPECT_NEAR(gpu.reports[0].grad_sqr, s.sqr(), 0.05 * s.sqr());
  EXPECT_NEAR(gpu.reports[0].grad_var * gpu.reports[0].base_batch, s.trace(), 0.05 * s.trace());
  // AdaScale's gain at S = 2 applied through apply_gradients (lr_scaling on the device path).
  const double var = s.trace() / 64, sqr = s.sqr();
  EXPECT_NEAR(gpu.scales[0].back(), (var + sqr) / (var / 2 + sqr), 0.03);
}

TEST(GpuAllreduceNoiseScale, NormsOnlyOnDueRoundsAndLinearScaling) {
  auto s = make_synthetic(256, 1.0, 256.0);
  const auto spec = spec_of(2, 32, "linear", 8);
  auto counts = std::make_shared<fakes::host_op_counts>();
  auto cpu = run_ring(s, 4, spec, 4000);
  auto gpu = run_ring(s, 4, spec, 4000, true, counts);
  expect_same_figures(gpu, cpu);
  // 1 round in 8 (the first included): |g|^2 before the sum and |mean g|^2 after it.
  EXPECT_EQ(counts->norms, 2 * (1 + 3999 / 8));
  EXPECT_EQ(counts->keeps, 0) << "a ring keeps no gradient";
  for (double x : gpu.scales[0]) ASSERT_DOUBLE_EQ(x, 2.0);  // linear at S = 2, full rounds
  EXPECT_NEAR(gpu.reports[0].grad_sqr, s.sqr(), 0.05 * s.sqr());
  EXPECT_NEAR(gpu.reports[0].grad_var * gpu.reports[0].base_batch, s.trace(), 0.05 * s.trace());
}

TEST(GpuAllreduceNoiseScale, ALoneReplicaPairsConsecutiveStepsOnTheDevice) {
  auto s = make_synthetic(256, 1.0, 256.0);
  for (std::size_t every : {1, 8}) {
    const auto spec = spec_of(1, 32, "sqrt", every);
    const int steps = every == 1 ? 6000 : 12000;
    auto counts = std::make_shared<fakes::host_op_counts>();
    auto cpu = run_ring(s, 1, spec, steps);
    auto gpu = run_ring(s, 1, spec, steps, true, counts);
    std::printf(
        "device path, alone, norms every %zu: |G|^2 %.4f (cpu %.4f, known %.4f), tr %.1f (cpu %.1f)\n", every,
        gpu.reports[0].grad_sqr, cpu.reports[0].grad_sqr, s.sqr(),
        gpu.reports[0].grad_var * gpu.reports[0].base_batch,
        cpu.reports[0].grad_var * cpu.reports[0].base_batch);
    expect_same_figures(gpu, cpu);
    EXPECT_NEAR(gpu.reports[0].grad_sqr, s.sqr(), 0.05 * s.sqr());
    EXPECT_NEAR(gpu.reports[0].grad_var * gpu.reports[0].base_batch, s.trace(), 0.05 * s.trace());
    // A copy only before a due round (after steps every, 2 every, ...), a reduction only on it (the
    // last copy has no next step). With 1 in 8, step 0 is due with no step before it to pair: step 1
    // is due again (the retry of a due step that added nothing) and pairs with it, one more of each.
    const int due = steps / static_cast<int>(every) + (every > 1 ? 1 : 0);
    EXPECT_EQ(counts->keeps, due) << "every " << every;
    EXPECT_EQ(counts->norms, due - 1) << "every " << every;
    for (double x : gpu.scales[0]) ASSERT_DOUBLE_EQ(x, 1.0);  // sqrt at S = 1
  }
}

// With Adam both paths estimate the statistics of the preconditioned gradient g / p (p from Adam's
// second moments, grad_norms.hpp): |G|_P^2 = sum G_j^2 w_j and tr_P = sum sigma_j^2 w_j; the device
// path computes its weights once (the moments do not move here) and the same figures as the CPU's.
// With coordinates whose v is 0 (inputs no example had lit), their weights are bounded by the floor on
// both paths: the figures stay those of the floored weights instead of 1 / eps^2's.
TEST(GpuAllreduceNoiseScale, WithAdamBothPathsEstimateThePreconditionedGradient) {
  for (bool unlit : {false, true})
    for (int ranks : {4, 1}) {
      SCOPED_TRACE(unlit ? "1 coordinate in 16 unlit" : "every coordinate lit");
      auto s = with_adam_moments(make_synthetic(256, 1.0, 256.0), unlit);
      auto spec = spec_of(static_cast<std::uint32_t>(ranks), 32, "none");
      spec.nn.train.optimizer.type = "adam";
      const auto w = adam_weights(s, spec.nn.train.optimizer);
      double sqr = 0, trace = 0;
      for (std::size_t j = 0; j < w.size(); ++j) {
        sqr += s.g[j] * s.g[j] * w[j];
        trace += s.sigma[j] * s.sigma[j] * w[j];
      }
      // The preconditioned noise scale is not the plain one.
      ASSERT_GT(std::abs(trace / sqr - s.trace() / s.sqr()), 0.2 * s.trace() / s.sqr());
      auto counts = std::make_shared<fakes::host_op_counts>();
      const int steps = ranks == 1 ? 6000 : 3000;
      auto cpu = run_ring(s, ranks, spec, steps);
      auto gpu = run_ring(s, ranks, spec, steps, true, counts);
      const auto& g = gpu.reports[0];
      std::printf("adam, %d rank(s): |G|_P^2 %.1f (cpu %.1f, known %.1f), tr_P %.0f (cpu %.0f, known %.0f)\n",
                  ranks, g.grad_sqr, cpu.reports[0].grad_sqr, sqr, g.grad_var * g.base_batch,
                  cpu.reports[0].grad_var * cpu.reports[0].base_batch, trace);
      expect_same_figures(gpu, cpu);
      EXPECT_NEAR(g.grad_sqr, sqr, 0.05 * sqr) << ranks << " rank(s)";
      EXPECT_NEAR(g.grad_var * g.base_batch, trace, 0.05 * trace) << ranks << " rank(s)";
      EXPECT_EQ(counts->preconditions, 1) << "the weights once: Adam's step stays " << synthetic::adam_step;
      if (unlit) {  // what the weights without the floor would have made the figures
        double raw = 0;
        for (std::size_t j = 0; j < w.size(); ++j) {
          const auto& oc = spec.nn.train.optimizer;
          const double p =
              std::sqrt(s.adam_v[j] / (1.0 - std::pow(oc.beta2, synthetic::adam_step))) + oc.epsilon;
          raw += s.g[j] * s.g[j] / (p * p);
        }
        std::printf("  unbounded weights: |G|_P^2 %.3g\n", raw);
        ASSERT_GT(raw, 1e6 * sqr);
      }
    }
}

// ---- the PS shards' estimate from the pushes they receive (ps/push_noise.hpp) ----

// Two shards, one holding coordinates [0, 128) as two tensors, the other [128, 256) as one; each push
// a batch of `rows` samples' mean gradient, sliced as the worker slices it. Returns the shards'.
struct two_shards {
  std::vector<nn::dense_slots> slots{3};  // a1, a2, b (Adam's: first moments, then s.adam_v)
  push_noise a, b;
  two_shards(const synthetic& s, double m0, std::size_t every, const nn::optimizer_config& opt)
      : a({{"a1", 64}, {"a2", 64}}, m0, every, opt), b({{"b", 128}}, m0, every, opt) {
    const std::size_t at[] = {0, 64, 128}, n[] = {64, 64, 128};
    for (std::size_t k = 0; k < 3 && !s.adam_v.empty(); ++k) {
      slots[k].values.assign(2 * n[k], 0.0f);
      std::copy_n(s.adam_v.begin() + static_cast<std::ptrdiff_t>(at[k]), n[k],
                  slots[k].values.begin() + static_cast<std::ptrdiff_t>(n[k]));
      slots[k].step = synthetic::adam_step;
    }
  }
  void push(std::span<const float> g, std::uint32_t rows) {
    if (a.begin(rows)) {
      a.tensor("a1", g.subspan(0, 64), slots[0]);
      a.tensor("a2", g.subspan(64, 64), slots[1]);
      a.end();
    }
    if (b.begin(rows)) {
      b.tensor("b", g.subspan(128, 128), slots[2]);
      b.end();
    }
  }
  double sqr() const { return a.report().grad_sqr + b.report().grad_sqr; }
  double var() const { return a.report().grad_var + b.report().grad_var; }
};

TEST(PushNoise, TwoShardsSlicesSumToTheKnownStatistics) {
  auto s = make_synthetic(256, 1.0, 256.0);
  const double m0 = 256;  // 8 workers x 32: the averages' time constant, ~500 pairs at 1 in 8
  for (std::size_t every : {1, 8}) {
    two_shards sh(s, m0, every, {});
    std::mt19937_64 rng(5);
    std::vector<float> g(256);
    const int pushes = every == 1 ? 4000 : 16000;
    for (int k = 0; k < pushes; ++k) {
      draw_gradient(s, rng, 32, g);
      sh.push(g, 32);
    }
    std::printf("shards' sum, pairs 1 in %zu: |G|^2 %.4f (known %.4f), tr %.1f (known %.1f), %llu pairs\n",
                every, sh.sqr(), s.sqr(), sh.var() * m0, s.trace(),
                static_cast<unsigned long long>(sh.a.report().rounds));
    EXPECT_NEAR(sh.sqr(), s.sqr(), 0.05 * s.sqr()) << "every " << every;
    EXPECT_NEAR(sh.var() * m0, s.trace(), 0.05 * s.trace()) << "every " << every;
    EXPECT_EQ(sh.a.report().rounds, static_cast<std::uint64_t>(every == 1 ? pushes - 1 : pushes / every));
    EXPECT_EQ(sh.b.report().rounds, sh.a.report().rounds);
    // Each shard alone estimates its slice only: neither is the whole.
    EXPECT_LT(sh.a.report().grad_var * m0, 0.8 * s.trace());
  }
}

// The pushes' rows repeat with a period of their own (2 workers, tasks of 7 batches of 64 and one of
// 52: 16 pushes). With a pair due every 16 pushes, a fixed phase whose keep lands on the short batch
// would never pair (a shard's estimate frozen at its first pair for a whole job, seen under load);
// a due push that makes no pair keeps its own gradients and the next pairs with it.
TEST(PushNoise, AShortBatchOnTheDuePushDelaysThePairByOne) {
  auto s = make_synthetic(256, 1.0, 256.0);
  two_shards sh(s, 256, 16, {});
  std::mt19937_64 rng(5);
  std::vector<float> g(256);
  const int pushes = 1600;
  for (int k = 0; k < pushes; ++k) {
    const std::uint32_t rows = k % 16 == 0 ? 52 : 64;  // the short batch on every due push
    draw_gradient(s, rng, rows, g);
    sh.push(g, rows);
  }
  const auto rounds = sh.a.report().rounds;
  std::printf("short batch on the due push: %llu pairs in %d pushes (1 in 16: %d), |G|^2 %.3f, tr %.1f\n",
              static_cast<unsigned long long>(rounds), pushes, pushes / 16, sh.sqr(), sh.var() * 256);
  EXPECT_GE(rounds, static_cast<std::uint64_t>(pushes / 16 - 2));
  EXPECT_LE(rounds, static_cast<std::uint64_t>(pushes / 16));
  EXPECT_EQ(sh.b.report().rounds, rounds);
}

// async_ps's own estimate, each worker's until the shards' comes (no_ps: it never does), pairs its
// consecutive full batches as the shards pair pushes: a worker's batches repeat with its tasks'
// period (a 500-record task: 7 batches of 64 and one of 52), and with 1 pair in 8 a fixed phase on
// the short batch never paired; a short batch on the due one delays the pair by one.
TEST(AsyncPsNoiseScale, AShortBatchOnTheDueBatchDelaysTheWorkersPairByOne) {
  auto s = make_synthetic(256, 1.0, 256.0);
  auto spec = spec_of(1, 64, "none", 8);
  spec.job.strategy = "async_ps";
  synthetic_backend be(s, 3);
  no_ps ps;
  shared_ring ring(1);
  rank_ring rr(ring, 0);
  node_id self{"worker-0", 0};
  worker_context ctx{spec, self, be, ps, rr};
  auto strat = make_strategy("async_ps", spec);
  ASSERT_TRUE(strat) << strat.err().to_string();
  nn::dataset data;
  data.rows = 64;
  const nn::batch full(data, 0, 64), short_batch(data, 0, 52);
  const int batches = 8000;
  for (int k = 0; k < batches; ++k) {
    const auto& b = k % 8 == 1 ? short_batch : full;  // the short batch where the pair was due
    ASSERT_EQ((*strat)->step(ctx, &b, false).what, step_result::kind::trained) << "batch " << k;
  }
  const auto g = (*strat)->goodput();
  std::printf(
      "async_ps worker, short batch on the due one: %llu pairs in %d batches, |G|^2 %.3f (known %.3f), "
      "tr %.1f (known %.1f)\n",
      static_cast<unsigned long long>(g.rounds), batches, g.grad_sqr, s.sqr(), g.grad_var * g.base_batch,
      s.trace());
  ASSERT_TRUE(g.valid) << "no pair in " << batches << " batches";
  EXPECT_GE(g.rounds, static_cast<std::uint64_t>(batches / 8 - 2));
  EXPECT_LE(g.rounds, static_cast<std::uint64_t>(batches / 8));
  EXPECT_NEAR(g.grad_sqr, s.sqr(), 0.1 * s.sqr());
  EXPECT_NEAR(g.grad_var * g.base_batch, s.trace(), 0.1 * s.trace());
}

TEST(PushNoise, PushesOfOtherRowsOrUnknownRowsAreNotPaired) {
  auto s = make_synthetic(256, 1.0, 256.0);
  two_shards sh(s, 64, 1, {});
  std::mt19937_64 rng(5);
  std::vector<float> g(256);
  for (int k = 0; k < 200; ++k) {
    const std::uint32_t rows = k % 3 == 2 ? 0 : (k % 3 == 0 ? 32 : 16);
    draw_gradient(s, rng, rows ? rows : 8, g);
    sh.push(g, rows);
  }
  EXPECT_EQ(sh.a.report().rounds, 0u) << "pairs of pushes of 32 and 16 rows, or of unsaid rows";
  two_shards partial(s, 64, 1, {});
  for (int k = 0; k < 50; ++k) {  // a push without one of the shard's tensors does not count
    draw_gradient(s, rng, 32, g);
    if (partial.a.begin(32)) {
      partial.a.tensor("a1", std::span<const float>(g).subspan(0, 64), partial.slots[0]);
      partial.a.end();
    }
  }
  EXPECT_EQ(partial.a.report().rounds, 0u);
}

// With Adam (its second moments 5 steps old or more) the shards' norms are of the preconditioned
// gradient, as the worker's are: the sum is |G|_P^2 and tr_P.
TEST(PushNoise, WithAdamTheShardsEstimateThePreconditionedGradient) {
  for (bool unlit : {false, true}) {
    SCOPED_TRACE(unlit ? "1 coordinate in 16 unlit" : "every coordinate lit");
    auto s = with_adam_moments(make_synthetic(256, 1.0, 256.0), unlit);
    nn::optimizer_config opt;
    opt.type = "adam";
    const auto w = adam_weights(s, opt, {64, 64, 128});  // each tensor its own floor
    double sqr = 0, trace = 0;
    for (std::size_t j = 0; j < w.size(); ++j) {
      sqr += s.g[j] * s.g[j] * w[j];
      trace += s.sigma[j] * s.sigma[j] * w[j];
    }
    two_shards sh(s, 64, 1, opt);
    std::mt19937_64 rng(5);
    std::vector<float> g(256);
    for (int k = 0; k < 4000; ++k) {
      draw_gradient(s, rng, 32, g);
      sh.push(g, 32);
    }
    std::printf("shards' sum with Adam: |G|_P^2 %.1f (known %.1f), tr_P %.0f (known %.0f)\n", sh.sqr(), sqr,
                sh.var() * 64, trace);
    EXPECT_TRUE(sh.a.report().preconditioned);
    EXPECT_NEAR(sh.sqr(), sqr, 0.05 * sqr);
    EXPECT_NEAR(sh.var() * 64, trace, 0.05 * trace);
  }
}

// A shard's estimate survives its checkpoint (push_noise::state()): a fresh shard restored from it
// reports the same averages and pair count, and goes on from there as the original does; a state
// that is not this shard's (other M0, size or layout, a non-finite average, preconditioned norms
// without Adam) is refused and leaves the fresh estimate as it was.
TEST(PushNoise, TheEstimateRestoredFromItsStateGoesOnAsTheOriginal) {
  auto s = make_synthetic(256, 1.0, 256.0);
  two_shards sh(s, 64, 1, {});
  std::mt19937_64 rng(5);
  std::vector<float> g(256);
  for (int k = 0; k < 300; ++k) {
    draw_gradient(s, rng, 32, g);
    sh.push(g, 32);
  }
  const auto kept = sh.a.state();
  two_shards back(s, 64, 1, {});
  ASSERT_TRUE(back.a.restore(kept));
  const auto was = sh.a.report(), now = back.a.report();
  EXPECT_EQ(now.rounds, was.rounds);
  EXPECT_FLOAT_EQ(static_cast<float>(now.grad_sqr), static_cast<float>(was.grad_sqr));
  EXPECT_FLOAT_EQ(static_cast<float>(now.grad_var), static_cast<float>(was.grad_var));
  EXPECT_EQ(now.preconditioned, was.preconditioned);
  // The same pushes after it: the restored one pairs from its second push on (its first starts a
  // pair: the one across the checkpoint is the original's alone, ~1/1000 of the averages' weight), and
  // its averages stay within 1% of the original's (0.14% here).
  for (int k = 0; k < 100; ++k) {
    draw_gradient(s, rng, 32, g);
    sh.push(g, 32);
    if (back.a.begin(32)) {
      back.a.tensor("a1", std::span<const float>(g).subspan(0, 64), back.slots[0]);
      back.a.tensor("a2", std::span<const float>(g).subspan(64, 64), back.slots[1]);
      back.a.end();
    }
  }
  EXPECT_EQ(back.a.report().rounds, was.rounds + 99) << "the original's " << sh.a.report().rounds;
  EXPECT_NEAR(back.a.report().grad_sqr, sh.a.report().grad_sqr, 0.01 * std::abs(sh.a.report().grad_sqr));
  EXPECT_NEAR(back.a.report().grad_var, sh.a.report().grad_var, 0.01 * std::abs(sh.a.report().grad_var));

  auto refused = [&](std::vector<float> st, double m0, const nn::optimizer_config& opt, const char* why) {
    two_shards fresh(s, m0, 1, opt);
    EXPECT_FALSE(fresh.a.restore(st)) << why;
    EXPECT_EQ(fresh.a.report().rounds, 0u) << why;
  };
  refused(kept, 128, {}, "another M0");
  refused(std::vector<float>(kept.begin(), kept.end() - 1), 64, {}, "a float short");
  auto other = kept;
  other[0] = 2.0f;
  refused(other, 64, {}, "another layout");
  other = kept;
  other[4] = std::numeric_limits<float>::quiet_NaN();
  refused(other, 64, {}, "a NaN average");
  other = kept;
  other[2] = 1.0f;
  refused(other, 64, {}, "preconditioned, with SGD");
  nn::optimizer_config adam;
  adam.type = "adam";
  two_shards with_adam(s, 64, 1, adam);
  EXPECT_TRUE(with_adam.a.restore(other)) << "preconditioned, with Adam";
  EXPECT_TRUE(with_adam.a.report().preconditioned);
}

// The worker's sum of the shards' push estimates: every dense shard's, of one kind. A shard whose
// latest reply is still of the plain gradient while another's is preconditioned (Adam's weights
// start a push apart; a restarted shard is behind) gives no sum: the worker keeps its last.
TEST(PushNoise, TheWorkersSumTakesEveryShardOfOneKind) {
  const std::vector<std::string> shards{"ps-1", "ps-2"};
  std::map<std::string, pushed_noise> latest{{"ps-0", {9, 9, 9, 1, false}}, {"ps-1", {1.5, 20, 7, 1, true}}};
  EXPECT_FALSE(sum_pushed_noise(latest, shards)) << "a shard without an estimate";
  latest["ps-2"] = {0.5, 10, 5, 1, false};
  EXPECT_FALSE(sum_pushed_noise(latest, shards)) << "plain and preconditioned norms summed";
  latest["ps-2"].preconditioned = true;
  auto sum = sum_pushed_noise(latest, shards);
  ASSERT_TRUE(sum);
  EXPECT_DOUBLE_EQ(sum->grad_sqr, 2.0);  // ps-0 holds no dense tensor: not in the sum
  EXPECT_DOUBLE_EQ(sum->grad_var, 30.0);
  EXPECT_EQ(sum->rounds, 5u);
  EXPECT_EQ(sum->shards, 2u);
  EXPECT_TRUE(sum->preconditioned);
  EXPECT_FALSE(sum_pushed_noise(latest, {}));
}

}  // namespace
}  // namespace troupe::actors
