#!/usr/bin/python3
"""What an allocation policy can win on the cluster experiments' traces, with every overhead at zero
(issue #48's target for the goodput policy: >= 25% lower average JCT than today's elastic policy).

A fluid model of experiments.py's traces (the same schedules: trace_schedule): 24 CPUs; a job in the
system holds control_cpus (its master and PS shard) from its admission to its end; its workers each
train PACE samples/s (the runs pace them), so a job of e epochs over r rows is e * r / PACE
worker-seconds of work, done at its allocation's rate, between 1 and max_workers (2 x its workers).
No start-up, no Slurm latency, no resize cost, no evaluation: what is left is the policy alone.
Event-driven: the allocation changes only at arrivals and completions.

Policies:
  elastic   today's: each job its own `workers` (high-priority jobs first, then by arrival), then
            up to as many again from what is left (`spare`), by arrival
  goodput   Pollux's objective with linear speedups (the trace's paced async jobs, throughput as
            goodput): the power mean (p = -1) of speedups over the fair share is largest when the
            shares are equal, capped at each job's maximum (water-filling)
  srpt      shortest remaining work first, each up to its maximum: for average JCT the best one can
            do at one moment (not a policy the issue asks for; the bound's other side)

With admission (experiments.py's default since 2026-11-28), a job enters once its control plane and
one worker fit beside the jobs in the system; without it every arrival enters, and once the control
planes hold every CPU no job can finish (reported as a deadlock).

  /usr/bin/python3 bench/cluster/fluid_bound.py [--json]
"""
import argparse
import json
import os
import sys
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import experiments  # noqa: E402  (the traces, the cluster's size and the pace)

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


def goodput(jobs, cap):
    alloc, left = {j["name"]: 0 for j in jobs}, cap
    while left > 0:
        open_ = [j for j in jobs if alloc[j["name"]] < j["max_workers"]]
        if not open_:
            break
        j = min(open_, key=lambda j: (alloc[j["name"]], j["at"]))
        alloc[j["name"]] += 1
        left -= 1
    return alloc


def srpt(jobs, cap):
    alloc, left = {}, cap
    for j in sorted(jobs, key=lambda j: (j["left"], j["at"])):
        alloc[j["name"]] = min(j["max_workers"], left)
        left -= alloc[j["name"]]
    return alloc


POLICIES = {"elastic": elastic, "goodput": goodput, "srpt": srpt}


def work(j, pace=experiments.PACE):
    return j["epochs"] * j["rows"] / pace


def simulate(schedule, policy, admission=True, cpus=CPUS):
    """{"avg", "p99", "makespan", "jct": {name: s}} or {"deadlock": t} when nothing can progress."""
    queue = sorted(({**j, "left": work(j)} for j in schedule), key=lambda j: j["at"])
    inside, jct, t = [], {}, 0.0
    while queue or inside:
        while queue and queue[0]["at"] <= t + 1e-9:
            ctl = experiments.control_cpus(queue[0]["shards"])
            held = sum(experiments.control_cpus(j["shards"]) + 1 for j in inside)
            if admission and held + ctl + 1 > cpus:
                break
            inside.append(queue.pop(0))
        cap = cpus - sum(experiments.control_cpus(j["shards"]) for j in inside)
        alloc = policy(inside, max(0, cap)) if inside else {}
        rates = {j["name"]: alloc.get(j["name"], 0) for j in inside}
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one JSON line per (trace, admission, policy)")
    args = ap.parse_args()
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
