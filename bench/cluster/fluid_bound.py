#!/usr/bin/python3
"""What an allocation policy can win on the cluster experiments' traces, with every overhead at zero
(issue #48's target for the goodput policy: >= 25% lower average JCT than today's elastic policy).

A fluid model of experiments.py's traces (the same schedules: trace_schedule): 24 CPUs; a job in the
system holds control_cpus (its master and PS shard) from its admission to its end; its workers each
train PACE samples/s (the runs pace them), so a job of e epochs over r rows is e * r / PACE
worker-seconds of work, done at its allocation's rate, between 1 and max_workers (2 x its workers).
No start-up, no Slurm latency, no resize cost, no evaluation: what is left is the policy alone.
Event-driven: the allocation changes only at arrivals and completions.

--sync-fractions R,...: the same traces mixed -- every other job (t00, t02, ...) made a synchronous
job that keeps its global batch whatever its size (strong scaling): a step is the batch's compute
split over n workers plus a synchronisation that does not shrink, R x the step's compute on one
worker, so n workers train at 1 / (1/n + R) workers' worth (R = 0.3: 1.25x at 2, 2.35x at 8). Its
data is cut so that at its own workers it takes as long as the trace's job. What the trace's jobs
lack (they all scale linearly) and what a goodput policy needs to win anything.

Policies:
  elastic   today's: each job its own `workers` (high-priority jobs first, then by arrival), then
            up to as many again from what is left (`spare`), by arrival
  goodput   Pollux's objective: the power mean (p = -1) of each job's speedup over its fair share,
            CPUs to the job whose increment raises it most per CPU (goodput_policy.py's search);
            with the trace's linear speedups that is equal shares capped at each maximum
  srpt      shortest remaining work first, each up to its maximum: for average JCT the best one can
            do at one moment (not a policy the issue asks for; the bound's other side)

With admission (experiments.py's default since 2026-11-28), a job enters once its control plane and
one worker fit beside the jobs in the system; without it every arrival enters, and once the control
planes hold every CPU no job can finish (reported as a deadlock).

  /usr/bin/python3 bench/cluster/fluid_bound.py [--json] [--sync-fractions 0.1,0.2,0.3] [--admission-workers 1,2]
"""
import argparse
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import experiments  # noqa: E402  (the traces, the cluster's size and the pace)
import goodput_policy  # noqa: E402  (the goodput policy's search: fill_best)

CPUS = experiments.CPUS_PER_HOST * experiments.HOSTS


def elastic(jobs, cap):
    alloc, left = {}, cap
    for j in sorted(jobs, key=lambda j: (j["priority"] != "high", j["at"])):
        alloc[j["name"]] = min(j["workers"], left)
        left -= alloc[j["name"]]
    for j in sorted(jobs, key=lambda j: j["at"]):
        more = min(j["max_workers"] - alloc[j["name"]], left)
        alloc[j["name"]] += more
        left -= more
    return alloc


def rate(j, n):
    """Workers' worth of training of job `j` at n workers: n, or for a synchronous job with sync
    fraction R (--sync-fractions) 1 / (1/n + R) from 2 workers on."""
    r = j.get("sync_fraction", 0.0)
    if n <= 0:
        return 0.0
    return float(n) if r <= 0 or n == 1 else 1.0 / (1.0 / n + r)


def harmonic_speedup(jobs, alloc, fair):
    sp = [rate(j, a) / rate(j, fair) for j, a in zip(jobs, alloc)]
    return 0.0 if min(sp) <= 0 else len(sp) / sum(1.0 / x for x in sp)


def goodput(jobs, cap):
    alloc, left = [0] * len(jobs), cap
    for i in sorted(range(len(jobs)), key=lambda i: jobs[i]["at"]):  # every job one worker, by arrival
        if left > 0:
            alloc[i], left = 1, left - 1
    fair = max(1, -(-cap // len(jobs)))
    goodput_policy.fill_best(alloc, [j["max_workers"] for j in jobs], left,
                             lambda a: harmonic_speedup(jobs, a, fair),
                             order=lambda a: sorted(range(len(jobs)), key=lambda i: (a[i], jobs[i]["at"])))
    return {j["name"]: a for j, a in zip(jobs, alloc)}


def srpt(jobs, cap):
    alloc, left = {}, cap
    for j in sorted(jobs, key=lambda j: (j["left"], j["at"])):
        alloc[j["name"]] = min(j["max_workers"], left)
        left -= alloc[j["name"]]
    return alloc


POLICIES = {"elastic": elastic, "goodput": goodput, "srpt": srpt}


def work(j, pace=experiments.PACE):
    return j["epochs"] * j["rows"] / pace


def simulate(schedule, policy, admission=True, cpus=CPUS, admit_workers=1):
    """{"avg", "p99", "makespan", "jct": {name: s}} or {"deadlock": t} when nothing can progress.
    With admission a job enters once its control plane and admit_workers workers fit beside the jobs
    in the system (each counted with as many)."""
    queue = sorted(({**j, "left": work(j)} for j in schedule), key=lambda j: j["at"])
    inside, jct, t = [], {}, 0.0
    while queue or inside:
        while queue and queue[0]["at"] <= t + 1e-9:
            ctl = experiments.control_cpus(queue[0]["shards"])
            held = sum(experiments.control_cpus(j["shards"]) + admit_workers for j in inside)
            if admission and held + ctl + admit_workers > cpus:
                break
            inside.append(queue.pop(0))
        cap = cpus - sum(experiments.control_cpus(j["shards"]) for j in inside)
        alloc = policy(inside, max(0, cap)) if inside else {}
        rates = {j["name"]: rate(j, alloc.get(j["name"], 0)) for j in inside}
        ends = [j["left"] / rates[j["name"]] for j in inside if rates[j["name"]] > 0]
        arrivals = [queue[0]["at"] - t] if queue and queue[0]["at"] > t + 1e-9 else []
        if not ends and not arrivals:
            return {"deadlock": round(t, 1), "in_system": len(inside), "waiting": len(queue)}
        dt = min(ends + arrivals)
        for j in inside:
            j["left"] -= rates[j["name"]] * dt
        t += dt
        for j in [j for j in inside if j["left"] <= 1e-6]:
            inside.remove(j)
            jct[j["name"]] = t - j["at"]
    v = sorted(jct.values())
    p99 = v[min(len(v) - 1, int(round(0.99 * (len(v) - 1))))]
    return {"avg": sum(v) / len(v), "p99": p99, "makespan": t - schedule[0]["at"], "jct": jct}


def traces():
    args = types.SimpleNamespace(scale=1.0)
    return {"trace": experiments.trace_schedule(args),
            "trace_heavy": experiments.trace_schedule(args, n=24, mean_gap=6.0, seed=11)}


def mixed(schedule, sync_fraction):
    """The trace with every other job synchronous (module docstring), each as long at its own workers."""
    out = []
    for i, j in enumerate(schedule):
        if i % 2 == 0:
            j = {**j, "sync_fraction": sync_fraction, "shards": 0}  # a master, no PS shard
            j["rows"] = j["rows"] * rate(j, j["workers"]) / j["workers"]
        out.append(j)
    return out


def report_mixed(fractions, as_json, admit_workers=1):
    for name, sched in traces().items():
        for r in fractions:
            res = {pol: simulate(mixed(sched, r), fn, admit_workers=admit_workers) for pol, fn in POLICIES.items()}
            if as_json:
                for pol, v in res.items():
                    v.pop("jct", None)
                    print(json.dumps({"trace": name, "sync_fraction": r, "admission_workers": admit_workers,
                                      "policy": pol, **v}))
                continue
            base = res["elastic"]["avg"]
            speed = "/".join(f"{rate({'sync_fraction': r}, n):.2f}" for n in (2, 4, 8, 16))
            print(f"{name} mixed, R = {r}, admission {admit_workers} (a sync job's speedup at 2/4/8/16 workers "
                  f"{speed}): " + ", ".join(
                f"{pol} {v['avg']:.1f} s ({v['avg'] / base - 1:+.1%})" for pol, v in res.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON line per (trace, admission, policy)")
    ap.add_argument("--sync-fractions", default="", help="comma-separated R: the mixed traces instead")
    ap.add_argument("--admission-workers", default="1", help="comma-separated K (mixed traces): a job enters "
                    "once its control plane and K workers fit")
    args = ap.parse_args()
    if args.sync_fractions:
        for k in (int(x) for x in args.admission_workers.split(",")):
            report_mixed([float(x) for x in args.sync_fractions.split(",")], args.json, k)
        return
    for name, sched in traces().items():
        load = sum(work(j) for j in sched) / (CPUS * (sched[-1]["at"] - sched[0]["at"]))
        print(f"{name}: {len(sched)} jobs, worker-seconds / (24 CPUs x arrival span) = {load:.2f}")
        for admission in (True, False):
            base = None
            for pol, fn in POLICIES.items():
                r = simulate(sched, fn, admission)
                r.pop("jct", None)
                if args.json:
                    print(json.dumps({"trace": name, "admission": admission, "policy": pol, **r}))
                    continue
                if "deadlock" in r:
                    print(f"  admission={admission!s:5} {pol:8} deadlock at {r['deadlock']} s "
                          f"({r['in_system']} jobs in, {r['waiting']} waiting)")
                    continue
                base = base or r["avg"]
                print(f"  admission={admission!s:5} {pol:8} average JCT {r['avg']:7.1f} s ({r['avg'] / base - 1:+.1%} "
                      f"vs elastic)  p99 {r['p99']:7.1f} s  makespan {r['makespan']:7.1f} s")


if __name__ == "__main__":
    main()
