"""Pollux's goodput model and cluster objective, small enough to embed in a scheduler (#48).

What Pollux (Qiao et al., OSDI '21) schedules by, re-written from its artifact
(petuum/adaptdl osdi21-artifact: simulator/goodput.py, speedup.py, pollux.py; Apache-2.0) with
numpy alone (scipy only to fit). bench/goodput/test_pollux_policy.py checks every function against
the artifact's code in bench/goodput/sim.

    from pollux_policy import (PerfParams, GradParams, fit_perf_params, step_time, throughput,
                               efficiency, goodput, best_batch, speedup, fair_share,
                               restart_factor, allocation_objective)

Throughput model (per optimizer step, allreduce data parallelism):
    T_compute(b)  = alpha_c + beta_c * b                         b: per-replica (atomic) batch
    T_network     = alpha_n + beta_n * max(R - 2, 0)   if the replicas span > 1 node
                  = alpha_r + beta_r * max(R - 2, 0)   if R > 1 replicas share one node
                  = 0                                  if R == 1
    T_step        = (T_compute^gamma + T_network^gamma)^(1/gamma)   gamma in [1, 10]: overlap
    with s gradient-accumulation steps: T = s * T_compute + T_step for a batch of R * b * (s + 1).
  fit_perf_params(nodes, replicas, atomic_bsz, compute_times, step_times) -> PerfParams fits it to
  measured (compute, full step) times as the artifact does (RMS log error, small priors, bounds).

Statistical efficiency (gradient noise scale): with GradParams(sqr, var) measured at the initial
batch size M0 (sqr = |E g|^2, var = tr Cov of one M0-batch gradient; Pollux measures them on
preconditioned gradients, so this is the preconditioned noise scale),
    pgns = var / sqr * M0,   efficiency(M) = (pgns + M0) / (pgns + M)     (1 at M = M0)
  and goodput = throughput (samples/s) * efficiency: progress per second in units of M0-samples.

best_batch(...) -> (goodput, atomic_bsz, accum_steps): the goodput-optimal batch for a placement
over 50 geometric batch sizes in [max(M0, min_atomic * R), max_batch] (the artifact's search).

Cluster objective: speedup(job, n, r) = goodput(n, r) / goodput at the job's fair share
(fair_share: ceil(total GPUs / jobs) replicas on ceil(nodes / total GPUs) nodes), scaled so that one
node's worth of the cluster is 1; a job whose allocation changes has it multiplied by
restart_factor = max(age - restart_time, 0) / (age + restart_delay), the share of its life it would
not have lost to restarts (age: seconds since submission; restart_time: seconds lost so far;
restart_delay: what this change costs: Pollux 30 s, troupe 0.05 s); allocation_objective is the
power mean (p = -1: harmonic, favouring fairness) over jobs of those, + 1e-3. PolluxSched maximises
it with a genetic algorithm over job x node replica matrices (bench/goodput/sim/pollux.py).

All functions take scalars or numpy arrays (broadcast) unless said otherwise.
"""
import collections

import numpy as np

PerfParams = collections.namedtuple(
    "PerfParams", ["alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r", "beta_r", "gamma"])
GradParams = collections.namedtuple("GradParams", ["sqr", "var"])

_EPS = 1e-8  # the artifact's tolerance in ceil/floor and its floor for absent network terms


def compute_time(perf, atomic_bsz):
    """Forward + backward seconds of one atomic batch on one replica."""
    return perf.alpha_c + perf.beta_c * np.asarray(atomic_bsz, dtype=float)


def network_time(perf, num_nodes, num_replicas):
    """Seconds of the gradient allreduce, before overlap with compute."""
    num_nodes, num_replicas = np.asarray(num_nodes), np.asarray(num_replicas)
    conds = [num_nodes > 1, num_replicas > 1]
    base = np.select(conds, [perf.alpha_n, perf.alpha_r], _EPS)
    retro = np.select(conds, [perf.beta_n, perf.beta_r], _EPS)
    return base + retro * np.maximum(num_replicas - 2, _EPS)


def _log_step_time(perf, compute, network):
    g = perf.gamma
    return np.log(compute ** g + network ** g) / g


def step_time(perf, num_nodes, num_replicas, atomic_bsz, accum_steps=0):
    """Seconds per optimizer step (accum_steps extra atomic batches before the synchronising one)."""
    compute = compute_time(perf, atomic_bsz)
    sync = np.exp(_log_step_time(perf, compute, network_time(perf, num_nodes, num_replicas)))
    return np.asarray(accum_steps) * compute + sync


def throughput(perf, num_nodes, num_replicas, atomic_bsz, accum_steps=0):
    """Samples per second."""
    batch = np.asarray(num_replicas) * np.asarray(atomic_bsz) * (np.asarray(accum_steps) + 1)
    return batch / step_time(perf, num_nodes, num_replicas, atomic_bsz, accum_steps)


def noise_scale(grad, init_batch_size):
    """Gradient noise scale var / sqr * M0 (preconditioned when the statistics are)."""
    return grad.var / grad.sqr * init_batch_size


def efficiency(grad, init_batch_size, batch_size):
    """Progress per sample at batch_size relative to init_batch_size: (pgns + M0) / (pgns + M)."""
    scale = np.asarray(batch_size, dtype=float) / init_batch_size
    denom = grad.var / scale + grad.sqr
    gain = np.where(denom > 0, (grad.var + grad.sqr) / np.where(denom > 0, denom, 1.0), 1.0)
    return gain / scale


def goodput(perf, grad, init_batch_size, num_nodes, num_replicas, atomic_bsz, accum_steps=0):
    """Throughput x efficiency: M0-equivalent samples per second."""
    batch = np.asarray(num_replicas) * np.asarray(atomic_bsz) * (np.asarray(accum_steps) + 1)
    return (throughput(perf, num_nodes, num_replicas, atomic_bsz, accum_steps) *
            efficiency(grad, init_batch_size, batch))


def best_batch(perf, grad, init_batch_size, num_nodes, num_replicas, max_batch_size=None,
               atomic_bsz_range=(None, None), accumulation=False):
    """(goodput, atomic_bsz, accum_steps) of the goodput-optimal total batch for each placement.

    Tries 50 batch sizes in geometric steps from max(M0, min_atomic * replicas) to max_batch_size;
    with accumulation, a local batch above max_atomic is split into accumulation steps (and a lone
    replica above M0 always accumulates at least once, as the artifact does, so that its gradient
    statistics have two batches to come from). Configurations outside atomic_bsz_range score 0.
    """
    max_batch_size = init_batch_size if max_batch_size is None else max_batch_size
    min_atomic = atomic_bsz_range[0] or 1
    max_atomic = atomic_bsz_range[1] or max_batch_size
    scalar = np.isscalar(num_nodes) or np.isscalar(num_replicas)
    shape = np.broadcast(num_nodes, num_replicas).shape
    nodes = np.broadcast_to(num_nodes, shape).flatten()
    replicas = np.broadcast_to(num_replicas, shape).flatten()
    batch = np.geomspace(np.maximum(init_batch_size, min_atomic * replicas), max_batch_size)
    local = batch / replicas
    if accumulation:
        accum = np.ceil(local / max_atomic - _EPS) - 1
        lone = np.logical_and(replicas == 1, local > init_batch_size + _EPS)
        accum = np.where(lone, np.maximum(accum, 1), accum).astype(int)
    else:
        accum = np.zeros_like(local, dtype=int)
    atomic = np.ceil(local / (accum + 1) - _EPS).astype(int)
    gp = goodput(perf, grad, init_batch_size, nodes, replicas, atomic, accum)
    gp = np.where((min_atomic <= atomic) & (atomic <= max_atomic), gp, 0.0)
    idx = np.argmax(gp, axis=0), np.arange(gp.shape[1])
    out = [a[idx].reshape(shape) for a in (gp, atomic, accum)]
    return tuple(a.item() for a in out) if scalar else tuple(out)


def speedup(perf, grad, init_batch_size, num_nodes, num_replicas, base=(1, 1),
            max_batch_size=None, atomic_bsz_range=(None, None), accumulation=False):
    """Best goodput at (num_nodes, num_replicas) over best goodput at base=(nodes, replicas);
    0 for 0 replicas."""
    kw = dict(max_batch_size=max_batch_size, atomic_bsz_range=atomic_bsz_range,
              accumulation=accumulation)
    base_gp = best_batch(perf, grad, init_batch_size, base[0], base[1], **kw)[0]
    num_nodes, num_replicas = np.asarray(num_nodes), np.asarray(num_replicas)
    live = num_replicas > 0
    gp = best_batch(perf, grad, init_batch_size, np.where(live, num_nodes, 1),
                    np.where(live, num_replicas, 1), **kw)[0]
    out = np.where(live, gp / base_gp, 0.0)
    return out.item() if out.ndim == 0 else out


def fair_share(num_jobs, num_nodes, gpus_per_node):
    """(nodes, replicas) of one job's equal share of a cluster of 1-GPU replicas, rounded up."""
    share = 1.0 / (num_nodes * gpus_per_node)  # dominant share of one replica
    return int(np.ceil(num_nodes * share)), int(np.ceil(1.0 / share / num_jobs))


def restart_factor(age, restart_time, restart_delay):
    """Share of a job's life not lost to restarts if it is reallocated now."""
    age = np.asarray(age, dtype=float)
    return np.maximum(age - restart_time, 0.0) / (age + restart_delay)


def allocation_objective(speedups, changed, age, restart_time, restart_delay, node_share, p=-1):
    """PolluxSched's fitness of candidate allocations.

    speedups: (candidates, jobs) speedup over fair share; changed: (candidates, jobs) bool, the
    job's allocation differs from its current one; age, restart_time, restart_delay: (jobs,);
    node_share: one node's dominant share x nodes, i.e. the scale that makes a node's worth 1
    (1 GPU of 64 on 16 nodes: 1/64 x 16). Returns (candidates,) power means (p = 0: geometric).
    """
    scaled = np.asarray(speedups, dtype=float) * node_share
    scaled = scaled * np.where(changed, restart_factor(age, restart_time, restart_delay), 1.0)
    n = scaled.shape[1]
    if p == 0:
        return np.exp(np.sum(np.log(np.maximum(scaled, 1e-3)), axis=1) / n)
    return (np.sum((scaled + 1e-3) ** p, axis=1) / n) ** (1.0 / p)


def _fit_objective(x, nodes, replicas, atomic, compute, step):
    """RMS log error of compute and step time, the artifact's priors, and its gradient."""
    perf = PerfParams(*x)
    ac, bc, an, bn, ar, br, g = x
    pred_c = compute_time(perf, atomic)
    pred_n = network_time(perf, nodes, replicas)
    total = pred_c ** g + pred_n ** g
    log_step = np.log(total) / g
    e1 = np.log(pred_c) - np.log(compute)
    e2 = log_step - np.log(step)
    err1, err2 = np.sqrt((e1 ** 2).mean()), np.sqrt((e2 ** 2).mean())
    value = err1 + err2 + 1e-3 * (g - 1) ** 2 + 1e-2 * ((bn / an) ** 2 + (br / ar) ** 2)
    inter = nodes > 1
    intra = ~inter & (replicas > 1)
    rounds = np.maximum(replicas - 2, _EPS)
    grad = np.zeros(7)
    if err1 > 0:
        d = e1 / (pred_c * len(e1) * err1)
        grad[0] += d.sum()
        grad[1] += (d * atomic).sum()
    if err2 > 0:
        w = e2 / (len(e2) * err2)
        dc, dn = w * pred_c ** (g - 1) / total, w * pred_n ** (g - 1) / total
        grad[0] += dc.sum()
        grad[1] += (dc * atomic).sum()
        grad[2:6] += [(dn * inter).sum(), (dn * inter * rounds).sum(),
                      (dn * intra).sum(), (dn * intra * rounds).sum()]
        dg = -np.log(total) / g ** 2 + (pred_c ** g * np.log(pred_c) +
                                         pred_n ** g * np.log(pred_n)) / (g * total)
        grad[6] += (w * dg).sum()
    grad[6] += 2e-3 * (g - 1)
    grad[2] -= 2e-2 * bn ** 2 / an ** 3
    grad[3] += 2e-2 * bn / an ** 2
    grad[4] -= 2e-2 * br ** 2 / ar ** 3
    grad[5] += 2e-2 * br / ar ** 2
    return value, grad


def _fit_bounds(nodes, replicas, atomic, compute):
    """Start, lower and upper bounds of the fit, with the parameters the data cannot show pinned."""
    x0 = [1e-1, 1e-2] * 3 + [1.0 + 1e-3]
    lower = [1e-8, 1e-8] * 3 + [1.0]
    upper = [np.inf, np.inf] * 3 + [10.0]

    def pin(i, value):
        x0[i] = lower[i] = upper[i] = value

    if len(np.unique(atomic)) == 1:
        pin(0, np.mean(compute) / 2)
    if not np.any(nodes > 1):
        pin(2, lower[2])
        pin(3, lower[3])
    if not np.any((nodes == 1) & (replicas > 1)):
        pin(4, lower[4])
        pin(5, lower[5])
    if not np.any(replicas > 2):
        pin(3, lower[3])
        pin(5, lower[5])
    return x0, lower, upper


def fit_perf_params(num_nodes, num_replicas, atomic_bsz, compute_times, step_times):
    """PerfParams fitted to measurements: per configuration, the compute seconds of one atomic
    batch and the seconds of a whole synchronising step. Parameters that the data cannot show are
    pinned as the artifact pins them (alpha_c to half the compute time if one batch size was seen;
    the inter-node terms without multi-node data, the intra-node ones without multi-replica
    single-node data, the retrogression terms without > 2 replicas; then alpha_n, beta_n >= 1.1x
    alpha_r, beta_r). Needs scipy."""
    import scipy.optimize

    nodes, replicas = np.asarray(num_nodes), np.asarray(num_replicas)
    atomic = np.asarray(atomic_bsz, dtype=float)
    compute, step = np.asarray(compute_times, float), np.asarray(step_times, float)
    x0, lower, upper = _fit_bounds(nodes, replicas, atomic, compute)
    res = scipy.optimize.minimize(_fit_objective, x0, jac=True,
                                  args=(nodes, replicas, atomic, compute, step),
                                  bounds=scipy.optimize.Bounds(lower, upper, keep_feasible=True))
    x = res.x
    if not np.any(nodes > 1):
        x[2] = max(x[2], x[4] * 1.1)
        x[3] = max(x[3], x[5] * 1.1)
    return PerfParams(*x)
