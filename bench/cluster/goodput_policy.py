"""A cluster policy by goodput for bench/cluster/experiments.py (issue #48 item 4): Pollux's
(OSDI '21) objective over troupe's running jobs, with troupe's measured resize cost.

Every period (and when a job arrives or finishes) the policy reallocates the cluster's worker CPUs
among the running jobs to maximise the power mean (p = -1) of each job's speedup over its fair share,
a reallocated job's speedup multiplied by Pollux's restart factor (age - seconds lost so far) /
(age + this change's cost). The formulas are bench/goodput/pollux_policy.py's (efficiency, speedup,
fair_share, restart_factor, allocation_objective); only the search differs: PolluxSched runs a
genetic algorithm over job x node matrices, this cluster has 4 hosts of 6 CPUs and at most a few
jobs, so CPUs go to the job whose increment raises the objective most (the harmonic
mean is concave in each job's share: greedy finds its optimum for separable concave speedups); the
increments it weighs go past flat steps (best gain per CPU over +1 .. +max CPUs), since a synchronous
job's speedup is not concave at its first replica.

What each job tells the policy (`troupe status --json`, docs/goodput.md):
  - goodput.grad_sqr, goodput.grad_var, goodput.base_batch: the gradient noise scale's statistics;
  - allreduce jobs: goodput.model (Pollux's fitted throughput model) -> pollux_policy.speedup (with
    batch = "global": the model's throughput at the job file's global batch split over n replicas);
  - async_ps jobs: the measured samples/s per worker (the trace's workers are paced: linear), and,
    with async_efficiency = "batch", statistical efficiency at an effective batch of workers x
    batch_size (asynchronous SGD with n workers applies n pushes per worker step: the gradient noise
    of n batches, modelled as one batch n times as large -- Pollux's model is for synchronous SGD;
    this is the usual approximation). With async_efficiency = "none" an async job's goodput is its
    throughput: each push stays a batch of batch_size whatever the number of workers, and a job
    whose end is counted in epochs (troupe's) finishes when its samples are trained, so the samples
    per second are what its completion time depends on.
A job that has not reported yet is taken as noise-free (efficiency 1: speedup linear in workers).

Placement (`pack=True`, Pollux's: a job's replicas on as few nodes as possible, its throughput model
told how many it spans): an allreduce job's ring on one host is shared memory, across hosts it is the
network, so such a job is modelled on one host up to `room` workers (the most it can have on one
host now: its workers there and the CPUs free there, after the round's shrinks) and spread over
min(hosts, n) beyond; `place` then picks the host for the workers each grow adds (`troupe scale
--host`). An allreduce job that has not measured its throughput model yet is
modelled linear up to its room and flat beyond. Without pack (the default, and the first runs) every
allreduce job is modelled spread, as Slurm's first free CPU places its workers under load.
"""
import collections
import importlib.util
import math
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def load_pollux_policy(path=None):
    """bench/goodput/pollux_policy.py (branch `pollux`, merging into main), or the file at `path`."""
    path = path or os.path.join(REPO, "bench", "goodput", "pollux_policy.py")
    if not os.path.exists(path):
        raise ImportError(f"{path} not found: the goodput policy uses pollux_policy.py (bench/goodput, "
                          "branch pollux); pass --pollux-policy FILE")
    spec = importlib.util.spec_from_file_location("pollux_policy", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class JobState:
    """What the policy knows of one running job."""

    def __init__(self, name, strategy, batch_size, max_workers, submit, min_workers=1, batch="fixed"):
        self.name, self.strategy, self.batch_size = name, strategy, batch_size
        self.batch = batch         # [train] batch: "fixed", "auto" or "global" (M0 at every size)
        self.max_workers, self.min_workers, self.submit = max_workers, min_workers, submit
        self.workers = 0           # alive, from the status
        self.target = 0            # what the policy last asked for
        self.per_worker = None     # measured samples/s per worker
        self.grad = None           # (sqr, var, base_batch)
        self.perf = None           # Pollux's PerfParams (allreduce jobs)
        self.restart_time = 0.0    # seconds lost to reallocations so far (Pollux's restart_time)
        self.hosts = collections.Counter()  # workers per host (the policy loop reads Slurm's queue)
        self.room = 0              # with pack: the most workers it can have on one host this round

    def update(self, status):
        self.workers = int(status.get("workers_alive", 0))
        sps = float(status.get("samples_per_sec", 0) or 0)
        if self.workers > 0 and sps > 0:
            self.per_worker = sps / self.workers
        g = status.get("goodput")
        if g and g.get("grad_var", 0) > 0 and g.get("base_batch", 0) > 0:
            self.grad = (max(float(g["grad_sqr"]), 0.0), float(g["grad_var"]), int(g["base_batch"]))
            m = g.get("model") or {}
            if self.strategy == "allreduce" and (m.get("alpha_c", 0) > 0 or m.get("beta_c", 0) > 0):
                self.perf = tuple(float(m[k]) for k in ("alpha_c", "beta_c", "alpha_n", "beta_n", "alpha_r",
                                                        "beta_r", "gamma"))


def fill_best(alloc, caps, left, objective, order=None):
    """Gives up to `left` more CPUs, each step the increment that raises objective(alloc) most per
    CPU, over +1 .. +cap for every job holding at least one (looking past flat steps: a synchronous
    job's second replica can add nothing -- its first has no sync to do -- and one CPU at a time
    would then never give it a third); stops when nothing raises it. `order(alloc)`: the indices in
    the order ties are broken (the first wins; default: as listed). Returns alloc, changed in place."""
    best = objective(alloc)
    while left > 0:
        choice, per_cpu = None, 1e-12
        for i in order(alloc) if order else range(len(alloc)):
            a = alloc[i]
            for k in range(1, min(left, caps[i] - a) + 1 if a > 0 else 0):
                alloc[i] = a + k
                gain = (objective(alloc) - best) / k
                if gain > per_cpu:
                    choice, per_cpu = (i, k), gain
            alloc[i] = a
        if choice is None:
            break
        alloc[choice[0]] += choice[1]
        left -= choice[1]
        best = objective(alloc)
    return alloc


class GoodputPolicy:
    def __init__(self, pp, cpus, hosts, restart_delay, p=-1.0, async_efficiency="batch", pack=False):
        if async_efficiency not in ("batch", "none"):
            raise ValueError(f"async_efficiency: 'batch' or 'none', not {async_efficiency!r}")
        self.pp, self.cpus, self.hosts, self.restart_delay, self.p = pp, cpus, hosts, restart_delay, p
        self.async_efficiency, self.pack = async_efficiency, pack

    def span(self, job, n):
        """Hosts an allreduce job's ring of n spans: 1 within its room (pack), else spread."""
        return 1 if self.pack and n <= job.room else min(self.hosts, n)

    def goodput(self, job, n, hosts=None):
        """Base-batch samples/s of `job` at n workers (0 at 0); an allreduce job's ring over `hosts`
        (default: span())."""
        if n <= 0:
            return 0.0
        pp = self.pp
        nodes = hosts or self.span(job, n)
        if job.strategy == "allreduce" and job.perf is not None and job.batch == "global" and job.grad:
            # The job file's global batch M0 at every size: ceil(M0 / n) per replica, one efficiency.
            m0 = job.grad[2]
            return float(pp.throughput(pp.PerfParams(*job.perf), nodes, n, math.ceil(m0 / n)))
        if job.strategy == "allreduce" and job.perf is not None and job.grad is not None and job.batch == "fixed":
            # batch_size per replica whatever the ring's size: the global batch grows with it (it was
            # valued as if the job chose its batch, as batch = "auto" does).
            sqr, var, m0 = job.grad
            thr = float(pp.throughput(pp.PerfParams(*job.perf), nodes, n, job.batch_size))
            return thr * float(pp.efficiency(pp.GradParams(sqr, var), m0, n * job.batch_size))
        if job.strategy == "allreduce" and job.perf is not None and job.grad is not None:
            perf = pp.PerfParams(*job.perf)
            grad = pp.GradParams(*job.grad[:2])
            return float(pp.best_batch(perf, grad, job.grad[2], nodes, n, max_batch_size=16 * job.grad[2],
                                       accumulation=True)[0])
        thr = n * (job.per_worker or 1.0)
        if self.pack and job.strategy == "allreduce" and job.perf is None:
            # No model yet: linear on one host, nothing more from crossing hosts until it has measured.
            thr = min(n, max(job.room, 1)) * (job.per_worker or 1.0)
        if job.grad is None or (job.strategy == "async_ps" and self.async_efficiency == "none"):
            return thr
        sqr, var, m0 = job.grad
        eff = float(pp.efficiency(pp.GradParams(sqr, var), m0, n * job.batch_size))
        return thr * eff

    def speedups(self, jobs, alloc, fair):
        # With pack the fair share is on one host, as Pollux's fair_share (1 node of 1-GPU replicas).
        base = 1 if self.pack else None
        return [self.goodput(j, a) / max(self.goodput(j, fair, base), 1e-12) for j, a in zip(jobs, alloc)]

    def objective(self, jobs, alloc, now, fair):
        pp = self.pp
        import numpy as np
        sp = np.array([self.speedups(jobs, alloc, fair)])
        # A job's first allocation (target 0: it is starting) is its start, not a reallocation.
        changed = np.array([[a != j.target and j.target > 0 for j, a in zip(jobs, alloc)]])
        age = np.array([max(now - j.submit, 1e-3) for j in jobs])
        restart = np.array([j.restart_time for j in jobs])
        delay = np.full(len(jobs), self.restart_delay)
        node_share = self.hosts / self.cpus  # one node's worth of the cluster is 1
        return float(pp.allocation_objective(sp, changed, age, restart, delay, node_share, p=self.p)[0])

    def allocate(self, jobs, worker_cpus, now):
        """Workers per job (same order), summing to at most worker_cpus: every job its minimum first
        (in submission order, while CPUs last), then CPUs to the best increment per CPU (fill_best)."""
        if not jobs:
            return []
        fair = max(1, math.ceil(worker_cpus / len(jobs)))
        order = sorted(range(len(jobs)), key=lambda i: jobs[i].submit)
        alloc = [0] * len(jobs)
        left = worker_cpus
        for i in order:
            take = min(jobs[i].min_workers, left)
            alloc[i] = take
            left -= take
        return fill_best(alloc, [j.max_workers for j in jobs], left,
                         lambda a: self.objective(jobs, a, now, fair))

    def rooms(self, jobs, idle):
        """Sets each allreduce job's room from `idle` (free CPUs per host): its workers on a host plus
        the free CPUs there, on its best host."""
        for j in jobs:
            if j.strategy == "allreduce":
                j.room = max([j.hosts[h] + idle.get(h, 0) for h in set(idle) | set(j.hosts)] or [0])

    def allocate_placed(self, jobs, worker_cpus, now, idle, leaving):
        """allocate() with pack: rooms from the free CPUs, then again with the CPUs the first pass's
        shrinks free (`leaving(job, n)`: the hosts of the workers job leaves going down to n) -- the
        allocation of the second pass, and {job name: host} for the allreduce jobs it grows
        (place())."""
        self.rooms(jobs, idle)
        alloc = self.allocate(jobs, worker_cpus, now)
        freed = collections.Counter(idle)
        for j, a in zip(jobs, alloc):
            if 0 < a < j.target:
                freed.update(leaving(j, a))
        self.rooms(jobs, freed)
        alloc = self.allocate(jobs, worker_cpus, now)
        return alloc, place(jobs, alloc, freed)

    def charge(self, job, new_target):
        """A reallocation of `job`: Pollux's restart_time grows by what it costs."""
        if new_target != job.target and job.target > 0:
            job.restart_time += self.restart_delay
        job.target = new_target


def place(jobs, alloc, idle):
    """Hosts for the workers the allreduce jobs' grows add: {name: host}, the job growing most first.
    Each goes to the host where the most of its ring of `a` can be (its workers there plus the free
    CPUs there, up to a; ties: where more of its workers already are) -- its new workers wait there
    for a CPU rather than cross hosts -- unless the ring cannot be on one host (a > room: the policy
    chose to spread it), when Slurm places them. `idle` (free CPUs per host) is not changed."""
    left = collections.Counter(idle)
    out = {}
    grows = [(a - j.target, a, j) for j, a in zip(jobs, alloc) if j.strategy == "allreduce" and a > j.target]
    for k, a, j in sorted(grows, key=lambda g: -g[0]):
        hosts = sorted(set(left) | set(j.hosts))
        if not hosts or a > j.room:
            continue
        pick = max(hosts, key=lambda h: (min(j.hosts[h] + left[h], a), j.hosts[h], h))
        out[j.name] = pick
        left[pick] = max(0, left[pick] - k)
    return out
