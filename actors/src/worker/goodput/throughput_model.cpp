#include "throughput_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <set>

namespace troupe::actors::goodput {

namespace {
constexpr double eps = 1e-8;  // Pollux's tolerance and its floor for absent network terms

double log_sync_time(double gamma, double compute, double network) {
  return std::log(std::pow(compute, gamma) + std::pow(network, gamma)) / gamma;
}

using vec7 = std::array<double, 7>;

perf_params from(const vec7& x) {
  return {x[0], x[1], x[2], x[3], x[4], x[5], x[6]};
}

// The residuals of Pollux's objective at `p` (gamma `g`): per observation the model's compute
// and network times, their overlap term and the log errors of compute and of sync; the RMS of each.
struct residuals {
  std::vector<double> e1, e2, pc, pn, tot;
  double err1 = 0, err2 = 0;
};

residuals residuals_of(const perf_params& p, double g, const std::vector<observation>& obs) {
  const std::size_t k = obs.size();
  residuals r{std::vector<double>(k), std::vector<double>(k), std::vector<double>(k), std::vector<double>(k),
              std::vector<double>(k)};
  double se1 = 0, se2 = 0;
  for (std::size_t i = 0; i < k; ++i) {
    r.pc[i] = compute_time(p, obs[i].atomic);
    r.pn[i] = network_time(p, obs[i].hosts, obs[i].replicas);
    r.tot[i] = std::pow(r.pc[i], g) + std::pow(r.pn[i], g);
    r.e1[i] = std::log(r.pc[i]) - std::log(obs[i].compute);
    r.e2[i] = std::log(r.tot[i]) / g - std::log(obs[i].sync);
    se1 += r.e1[i] * r.e1[i];
    se2 += r.e2[i] * r.e2[i];
  }
  const double n = static_cast<double>(k);
  r.err1 = std::sqrt(se1 / n);
  r.err2 = std::sqrt(se2 / n);
  return r;
}

// The gradient of the two RMS errors in x, added to `grad`.
void add_error_gradient(const residuals& r, const std::vector<observation>& obs, double g, vec7& grad) {
  const double n = static_cast<double>(obs.size());
  for (std::size_t i = 0; i < obs.size(); ++i) {
    const auto& o = obs[i];
    const bool inter = o.hosts > 1, intra = !inter && o.replicas > 1;
    const double rounds = std::max(static_cast<double>(o.replicas) - 2, eps);
    if (r.err1 > 0) {
      const double d = r.e1[i] / (r.pc[i] * n * r.err1);
      grad[0] += d;
      grad[1] += d * o.atomic;
    }
    if (!(r.err2 > 0)) continue;
    const double w = r.e2[i] / (n * r.err2);
    const double dc = w * std::pow(r.pc[i], g - 1) / r.tot[i], dn = w * std::pow(r.pn[i], g - 1) / r.tot[i];
    grad[0] += dc;
    grad[1] += dc * o.atomic;
    if (inter) {
      grad[2] += dn;
      grad[3] += dn * rounds;
    } else if (intra) {
      grad[4] += dn;
      grad[5] += dn * rounds;
    }
    const double dg = -std::log(r.tot[i]) / (g * g) +
                      (std::pow(r.pc[i], g) * std::log(r.pc[i]) + std::pow(r.pn[i], g) * std::log(r.pn[i])) /
                          (g * r.tot[i]);
    grad[6] += w * dg;
  }
}

// Pollux's objective (pollux_policy._fit_objective) and its gradient in x: the two RMS errors plus
// its priors (gamma near 1, small per-round network terms).
double objective(const vec7& x, const std::vector<observation>& obs, vec7& grad) {
  const double g = x[6];
  const residuals r = residuals_of(from(x), g, obs);
  const double value = r.err1 + r.err2 + 1e-3 * (g - 1) * (g - 1) +
                       1e-2 * ((x[3] / x[2]) * (x[3] / x[2]) + (x[5] / x[4]) * (x[5] / x[4]));
  grad.fill(0.0);
  add_error_gradient(r, obs, g, grad);
  grad[6] += 2e-3 * (g - 1);
  grad[2] -= 2e-2 * x[3] * x[3] / (x[2] * x[2] * x[2]);
  grad[3] += 2e-2 * x[3] / (x[2] * x[2]);
  grad[4] -= 2e-2 * x[5] * x[5] / (x[4] * x[4] * x[4]);
  grad[5] += 2e-2 * x[5] / (x[4] * x[4]);
  return value;
}

// Pollux's start (pollux_policy._fit_bounds), with the parameters the observations cannot show
// pinned as it pins them: one atomic batch size (alpha_c at half the mean compute time), no
// multi-host, no multi-replica single-host or no ring beyond two replicas (their network terms at eps).
struct start_point {
  vec7 x{1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3};
  std::array<bool, 7> pinned{};
  bool multi_host = false;
};

start_point start_of(const std::vector<observation>& obs) {
  start_point s;
  auto pin = [&](int i, double v) {
    s.x[i] = v;
    s.pinned[i] = true;
  };
  std::set<double> atomics;
  double compute_mean = 0;
  bool one_host_multi = false, beyond_two = false;
  for (const auto& o : obs) {
    atomics.insert(o.atomic);
    compute_mean += o.compute / static_cast<double>(obs.size());
    s.multi_host |= o.hosts > 1;
    one_host_multi |= o.hosts == 1 && o.replicas > 1;
    beyond_two |= o.replicas > 2;
  }
  if (atomics.size() == 1) pin(0, compute_mean / 2);
  if (!s.multi_host) pin(2, eps), pin(3, eps);
  if (!one_host_multi) pin(4, eps), pin(5, eps);
  if (!beyond_two) pin(3, eps), pin(5, eps);
  return s;
}

// Projected Adam on log(x) for the six times, on gamma itself within [1, 10]; the best x seen.
vec7 minimise(start_point s, const std::vector<observation>& obs) {
  vec7& x = s.x;
  vec7 m{}, v{}, grad{};
  const double lr = 0.05, b1 = 0.9, b2 = 0.999;
  vec7 best = x;
  double best_value = objective(x, obs, grad);
  for (int it = 1; it <= 3000; ++it) {
    const double value = objective(x, obs, grad);
    if (value < best_value) best_value = value, best = x;
    for (int i = 0; i < 7; ++i) {
      if (s.pinned[i]) continue;
      const double gi = i < 6 ? grad[i] * x[i] : grad[i];  // d/d log(x) = x d/dx
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double step =
          lr * (m[i] / (1 - std::pow(b1, it))) / (std::sqrt(v[i] / (1 - std::pow(b2, it))) + 1e-12);
      if (i < 6)
        x[i] = std::max(eps, x[i] * std::exp(-step));
      else
        x[i] = std::clamp(x[i] - step, 1.0, 10.0);
    }
  }
  if (objective(x, obs, grad) < best_value) best = x;
  return best;
}
}  // namespace

double compute_time(const perf_params& p, double atomic) {
  return p.alpha_c + p.beta_c * atomic;
}

double network_time(const perf_params& p, int hosts, int replicas) {
  const double rounds = std::max(static_cast<double>(replicas) - 2, eps);
  if (hosts > 1) return p.alpha_n + p.beta_n * rounds;
  if (replicas > 1) return p.alpha_r + p.beta_r * rounds;
  return eps + eps * rounds;
}

double step_time(const perf_params& p, int hosts, int replicas, double atomic, int accum) {
  const double c = compute_time(p, atomic);
  return accum * c + std::exp(log_sync_time(p.gamma, c, network_time(p, hosts, replicas)));
}

double throughput(const perf_params& p, int hosts, int replicas, double atomic, int accum) {
  const double t = step_time(p, hosts, replicas, atomic, accum);
  return t > 0 ? replicas * atomic * (accum + 1) / t : 0.0;
}

double goodput(const perf_params& p, const noise_scale& g, int hosts, int replicas, double atomic,
               int accum) {
  return throughput(p, hosts, replicas, atomic, accum) * g.efficiency(replicas * atomic * (accum + 1));
}

perf_params fit(const std::vector<observation>& in) {
  std::vector<observation> obs;
  for (const auto& o : in)
    if (o.compute > 0 && o.sync > 0 && o.atomic > 0 && o.replicas > 0) obs.push_back(o);
  if (obs.empty()) return {};
  const start_point start = start_of(obs);
  vec7 best = minimise(start, obs);
  if (!start.multi_host) {
    best[2] = std::max(best[2], best[4] * 1.1);
    best[3] = std::max(best[3], best[5] * 1.1);
  }
  return from(best);
}

batch_choice best_batch(const perf_params& p, const noise_scale& g, int hosts, int replicas,
                        const batch_limits& lim) {
  batch_choice best;
  const double m0 = g.base_batch();
  const double max_batch = std::max(lim.max_batch, m0);
  double max_atomic = lim.max_atomic > 0 ? lim.max_atomic : max_batch;
  if (lim.max_trusted_atomic > 0)
    max_atomic = std::max(lim.min_atomic, std::min(max_atomic, lim.max_trusted_atomic));
  const double lo = std::max(m0, lim.min_atomic * replicas);
  const double hi = std::max(lo, max_batch);
  constexpr int candidates = 50;
  for (int k = 0; k < candidates; ++k) {
    const double batch = lo * std::pow(hi / lo, static_cast<double>(k) / (candidates - 1));
    const double local = batch / replicas;
    int accum = static_cast<int>(std::ceil(local / max_atomic - eps)) - 1;
    if (replicas == 1 && local > m0 + eps) accum = std::max(accum, 1);
    accum = std::max(accum, 0);
    double atomic = std::ceil(local / (accum + 1) - eps);
    // Rounded up, a replica's share could take the global batch past max_batch (3 x 84 = 252 with
    // max_batch 250): rounded down there, max_batch being the largest global batch.
    if (replicas * atomic * (accum + 1) > max_batch + eps)
      atomic = std::floor(max_batch / (replicas * (accum + 1)));
    if (atomic < lim.min_atomic || atomic > max_atomic) continue;
    if (lim.max_local > 0 && atomic * (accum + 1) > lim.max_local) continue;
    const double gp = goodput(p, g, hosts, replicas, atomic, accum);
    if (gp > best.goodput) best = {gp, static_cast<int>(atomic), accum};
  }
  return best;
}

}  // namespace troupe::actors::goodput
