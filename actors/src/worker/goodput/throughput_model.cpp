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

// Pollux's objective (pollux_policy._fit_objective) and its gradient in x.
double objective(const vec7& x, const std::vector<observation>& obs, vec7& grad) {
  const auto p = from(x);
  const double g = x[6];
  const double n = static_cast<double>(obs.size());
  double se1 = 0, se2 = 0;
  std::vector<double> e1(obs.size()), e2(obs.size()), pc(obs.size()), pn(obs.size()), tot(obs.size());
  for (std::size_t i = 0; i < obs.size(); ++i) {
    pc[i] = compute_time(p, obs[i].atomic);
    pn[i] = network_time(p, obs[i].hosts, obs[i].replicas);
    tot[i] = std::pow(pc[i], g) + std::pow(pn[i], g);
    e1[i] = std::log(pc[i]) - std::log(obs[i].compute);
    e2[i] = std::log(tot[i]) / g - std::log(obs[i].sync);
    se1 += e1[i] * e1[i];
    se2 += e2[i] * e2[i];
  }
  const double err1 = std::sqrt(se1 / n), err2 = std::sqrt(se2 / n);
  const double value = err1 + err2 + 1e-3 * (g - 1) * (g - 1) +
                       1e-2 * ((x[3] / x[2]) * (x[3] / x[2]) + (x[5] / x[4]) * (x[5] / x[4]));
  grad.fill(0.0);
  for (std::size_t i = 0; i < obs.size(); ++i) {
    const auto& o = obs[i];
    const bool inter = o.hosts > 1, intra = !inter && o.replicas > 1;
    const double rounds = std::max(static_cast<double>(o.replicas) - 2, eps);
    if (err1 > 0) {
      const double d = e1[i] / (pc[i] * n * err1);
      grad[0] += d;
      grad[1] += d * o.atomic;
    }
    if (err2 > 0) {
      const double w = e2[i] / (n * err2);
      const double dc = w * std::pow(pc[i], g - 1) / tot[i], dn = w * std::pow(pn[i], g - 1) / tot[i];
      grad[0] += dc;
      grad[1] += dc * o.atomic;
      if (inter) {
        grad[2] += dn;
        grad[3] += dn * rounds;
      } else if (intra) {
        grad[4] += dn;
        grad[5] += dn * rounds;
      }
      const double dg =
          -std::log(tot[i]) / (g * g) +
          (std::pow(pc[i], g) * std::log(pc[i]) + std::pow(pn[i], g) * std::log(pn[i])) / (g * tot[i]);
      grad[6] += w * dg;
    }
  }
  grad[6] += 2e-3 * (g - 1);
  grad[2] -= 2e-2 * x[3] * x[3] / (x[2] * x[2] * x[2]);
  grad[3] += 2e-2 * x[3] / (x[2] * x[2]);
  grad[4] -= 2e-2 * x[5] * x[5] / (x[4] * x[4] * x[4]);
  grad[5] += 2e-2 * x[5] / (x[4] * x[4]);
  return value;
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
  // Start, bounds and pins as pollux_policy._fit_bounds.
  vec7 x{1e-1, 1e-2, 1e-1, 1e-2, 1e-1, 1e-2, 1.0 + 1e-3};
  std::array<bool, 7> pinned{};
  auto pin = [&](int i, double v) {
    x[i] = v;
    pinned[i] = true;
  };
  std::set<double> atomics;
  double compute_mean = 0;
  bool multi_host = false, one_host_multi = false, beyond_two = false;
  for (const auto& o : obs) {
    atomics.insert(o.atomic);
    compute_mean += o.compute / static_cast<double>(obs.size());
    multi_host |= o.hosts > 1;
    one_host_multi |= o.hosts == 1 && o.replicas > 1;
    beyond_two |= o.replicas > 2;
  }
  if (atomics.size() == 1) pin(0, compute_mean / 2);
  if (!multi_host) pin(2, eps), pin(3, eps);
  if (!one_host_multi) pin(4, eps), pin(5, eps);
  if (!beyond_two) pin(3, eps), pin(5, eps);
  // Projected Adam on log(x) for the six times, on gamma itself within [1, 10].
  vec7 m{}, v{}, grad{};
  const double lr = 0.05, b1 = 0.9, b2 = 0.999;
  vec7 best = x;
  double best_value = objective(x, obs, grad);
  for (int it = 1; it <= 3000; ++it) {
    const double value = objective(x, obs, grad);
    if (value < best_value) best_value = value, best = x;
    for (int i = 0; i < 7; ++i) {
      if (pinned[i]) continue;
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
  if (!multi_host) {
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
  const double max_atomic = lim.max_atomic > 0 ? lim.max_atomic : max_batch;
  const double lo = std::max(m0, lim.min_atomic * replicas);
  const double hi = std::max(lo, max_batch);
  constexpr int candidates = 50;
  for (int k = 0; k < candidates; ++k) {
    const double batch = lo * std::pow(hi / lo, static_cast<double>(k) / (candidates - 1));
    const double local = batch / replicas;
    int accum = static_cast<int>(std::ceil(local / max_atomic - eps)) - 1;
    if (replicas == 1 && local > m0 + eps) accum = std::max(accum, 1);
    accum = std::max(accum, 0);
    const double atomic = std::ceil(local / (accum + 1) - eps);
    if (atomic < lim.min_atomic || atomic > max_atomic) continue;
    if (lim.max_local > 0 && atomic * (accum + 1) > lim.max_local) continue;
    const double gp = goodput(p, g, hosts, replicas, atomic, accum);
    if (gp > best.goodput) best = {gp, static_cast<int>(atomic), accum};
  }
  return best;
}

}  // namespace troupe::actors::goodput
