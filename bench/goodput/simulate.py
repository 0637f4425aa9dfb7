#!/usr/bin/python3
"""Pollux's workloads in Pollux's own simulator, with Pollux's resize cost and with troupe's (#48).

Runs the artifact's simulator (bench/goodput/sim, from petuum/adaptdl's osdi21-artifact branch:
16 nodes x 4 GPUs, the 8 workloads of 160 jobs at 1.0x load) under these configurations:

  pollux          PolluxSched as published: 60 s scheduling period, 30 s lost per (re)start
  pollux-r1       the same policy, a resize of a running job costs 1 s (a start still 30 s)
  pollux-r0.05    the same policy, a resize costs 0.05 s: troupe's measured membership change
  troupe-30s      resize 0.05 s and a 30 s period (cheap resizes make frequent rescheduling free)
  troupe-10s      resize 0.05 s and a 10 s period
  tiresias        the artifact's Tiresias+TunedJobs (fixed GPUs and batch size), 60 s, 30 s
  optimus         the artifact's Optimus+Oracle+TunedJobs, 60 s, 30 s
  optimus-r0.05   the same with troupe's resize cost (Optimus resizes ~900 times a workload)
  lite-*          the pollux/troupe configurations with 1/8 of the GA's evaluations per round
                  (population 50, 25 generations), for machines where the full GA is too slow

Cost: a PolluxSched run is ~1,000 scheduling rounds (60 s period) of a 100 x 100 genetic
algorithm, ~0.4-1 CPU-s a round on this repo's dev VM: 10-20 CPU-minutes per workload at 60 s,
twice that at 30 s, six times at 10 s. Tiresias: seconds; Optimus: about a minute.

In every configuration the policy is told the costs it runs under (the restart penalty in
PolluxSched's objective). A start from zero replicas (a job's first, or after a preemption to
zero) costs 30 s everywhere: a checkpoint restore, which troupe does not make faster.

Prints one JSON line per (configuration, workload) as it finishes, then one per configuration
with the mean over the workloads it ran; appends the per-run lines to --out (JSON lines) and skips
runs already there, so a long sweep can be resumed.

  nice -n 10 /usr/bin/python3 bench/goodput/simulate.py [--configs pollux,troupe-30s]
      [--workloads 1-8] [--jobs 2] [--out /var/tmp/troupe-goodput/runs.jsonl] [--seed 0]
  /usr/bin/python3 bench/goodput/simulate.py --report [--out ...]   # the markdown table
  /usr/bin/python3 bench/goodput/simulate.py --horizon LOG...        # unfinished runs' stderr
"""
import argparse
import json
import multiprocessing
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SIM = os.path.join(HERE, "sim")

CONFIGS = {
    "pollux": dict(policy="pollux", interval=60, start_penalty=30.0, resize_penalty=30.0),
    "pollux-r1": dict(policy="pollux", interval=60, start_penalty=30.0, resize_penalty=1.0),
    "pollux-r0.05": dict(policy="pollux", interval=60, start_penalty=30.0, resize_penalty=0.05),
    "troupe-30s": dict(policy="pollux", interval=30, start_penalty=30.0, resize_penalty=0.05),
    "troupe-10s": dict(policy="pollux", interval=10, start_penalty=30.0, resize_penalty=0.05),
    # PolluxSched with a quarter of the GA's generations and half its population (1/8 of the
    # evaluations per scheduling round), for machines where the full GA takes too long.
    "lite-pollux": dict(policy="pollux", interval=60, start_penalty=30.0, resize_penalty=30.0,
                        pop_size=50, n_gen=25),
    "lite-pollux-r1": dict(policy="pollux", interval=60, start_penalty=30.0, resize_penalty=1.0,
                           pop_size=50, n_gen=25),
    "lite-pollux-r0.05": dict(policy="pollux", interval=60, start_penalty=30.0, resize_penalty=0.05,
                              pop_size=50, n_gen=25),
    "lite-troupe-30s": dict(policy="pollux", interval=30, start_penalty=30.0, resize_penalty=0.05,
                            pop_size=50, n_gen=25),
    "tiresias": dict(policy="tiresias", interval=60, start_penalty=30.0, resize_penalty=30.0),
    "optimus": dict(policy="optimus", interval=60, start_penalty=30.0, resize_penalty=30.0),
    # Optimus resizes running jobs often (no GA, cheap to simulate): the cost of a resize alone.
    "optimus-r0.05": dict(policy="optimus", interval=60, start_penalty=30.0, resize_penalty=0.05),
}


PROGRESS_EVERY_S = 3600  # default simulated seconds between progress lines on stderr


def percentile(values, q):
    """Linear interpolation between closest ranks (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def run_one(task):
    name, workload, seed, progress = task
    sys.path.insert(0, SIM)
    import simulator  # the artifact's, loaded in the worker process

    cfg = CONFIGS[name]
    args = argparse.Namespace(
        workload=os.path.join(SIM, "workloads", f"workload-{workload}.csv"), policy=cfg["policy"],
        min_nodes=16, max_nodes=None, interval=cfg["interval"], interference=0.0, num_gpus=4,
        low_util=None, high_util=None, output=None, start_penalty=cfg["start_penalty"],
        resize_penalty=cfg["resize_penalty"], seed=seed, verbose=False, summary_only=True,
        progress=progress, pop_size=cfg.get("pop_size", 100), n_gen=cfg.get("n_gen", 100))
    t0 = time.time()
    s = simulator.simulate(args)
    jcts = list(s["jcts"].values())
    return {"config": name, "workload": workload, **cfg, "seed": seed, "jobs": len(jcts),
            "avg_jct": sum(jcts) / len(jcts), "p99_jct": percentile(jcts, 99),
            "makespan": s["makespan"], "restarts": s["restarts"], "resizes": s["resizes"],
            "restart_seconds": s["restart_seconds"], "wall_s": round(time.time() - t0, 1)}


PUBLISHED = {  # the artifact's own results (sim/published/) and their period, for the same table
    "published pollux": ("results-jobload-pollux-1.0.json", 60),
    "published pollux 30 s": ("results-period-pollux-30s.json", 30),
    "published pollux 2 min": ("results-period-pollux-2m.json", 120),
    "published tiresias": ("results-jobload-tiresias-1.0.json", 60),
    "published optimus": ("results-jobload-optimus-1.0.json", 60),
}


def published_runs():
    """The artifact's summary.json files as run records (makespan from the workloads' arrivals)."""
    import csv
    runs = []
    for name, (fname, _) in PUBLISHED.items():
        with open(os.path.join(SIM, "published", fname)) as f:
            summary = json.load(f)
        for wname, jcts in summary["jcts"].items():
            w = int(wname.split("-")[1])
            with open(os.path.join(SIM, "workloads", f"{wname}.csv")) as f:
                submit = {r["name"]: float(r["time"]) for r in csv.DictReader(f)}
            values = list(jcts.values())
            runs.append({"config": name, "workload": w, "avg_jct": sum(values) / len(values),
                         "p99_jct": percentile(values, 99), "jobs": len(values),
                         "makespan": max(submit[k] + v for k, v in jcts.items()) - min(submit.values())})
    return runs


def report(path):
    """Markdown table of the runs in path and the artifact's published runs."""
    with open(path) as f:
        runs = [json.loads(line) for line in f]
    runs += published_runs()
    names = list(dict.fromkeys([r["config"] for r in runs if r["config"] in CONFIGS] +
                               [n for n in CONFIGS if any(r["config"] == n for r in runs)]))
    names = [n for n in CONFIGS if n in names] + list(PUBLISHED)
    workloads = sorted({r["workload"] for r in runs if r["config"] in CONFIGS})
    by = {(r["config"], r["workload"]): r for r in runs}
    print("| policy | period | resize (start) penalty | " +
          " | ".join(f"w{w} avg / p99 / makespan" for w in workloads) +
          " | mean avg / p99 / makespan (workloads run) |")
    print("|---" * (4 + len(workloads)) + "|")
    for n in names:
        cells, got = [], []
        for w in workloads:
            r = by.get((n, w))
            cells.append(f"{r['avg_jct']:.0f} / {r['p99_jct']:.0f} / {r['makespan']:.0f}" if r else "—")
            if r:
                got.append(r)
        if not got:
            continue
        mean = [sum(r[k] for r in got) / len(got) for k in ("avg_jct", "p99_jct", "makespan")]
        if n in CONFIGS:
            c = CONFIGS[n]
            head = f"{n} | {c['interval']} s | {c['resize_penalty']:g} s ({c['start_penalty']:g} s)"
        else:
            head = f"{n} | {PUBLISHED[n][1]} s | 30 s (30 s)"
        print(f"| {head} | " + " | ".join(cells) +
              f" | {mean[0]:.0f} / {mean[1]:.0f} / {mean[2]:.0f} ({','.join(str(r['workload']) for r in got)}) |")


def horizon_report(logs):
    """Compares runs that did not finish, from their progress lines, up to the simulated time all
    of them reached: jobs completed by then and the mean number of jobs in the system over
    [0, horizon]. The latter is the sum of all jobs' time in the system up to the horizon over its
    length, so over a whole run it is N x average JCT / makespan (Little's law): fewer is better."""
    series = {}
    for path in logs:
        points = []
        with open(path) as f:
            for line in f:
                parts = dict(kv.split("=") for kv in line.split()[2:] if "=" in kv)
                if "completed" in parts:
                    points.append((float(parts["t"]), int(parts["active"]), int(parts["completed"])))
        series[os.path.basename(path)] = points
    horizon = min(p[-1][0] for p in series.values() if p)
    for name, points in series.items():
        upto = [p for p in points if p[0] <= horizon]
        step = upto[1][0] - upto[0][0] if len(upto) > 1 else upto[0][0]
        # Samples every `step` simulated seconds; a job in the system at a sample counts for the
        # `step` before it.
        mean_active = sum(p[1] for p in upto) * step / horizon
        print(json.dumps({"log": name, "horizon_s": horizon, "completed": upto[-1][2],
                          "active_at_horizon": upto[-1][1], "mean_jobs_in_system": round(mean_active, 3)}))


def parse_range(text):
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--workloads", default="1-8")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="/var/tmp/troupe-goodput/runs.jsonl")
    ap.add_argument("--progress", type=int, default=PROGRESS_EVERY_S,
                    help="simulated seconds between progress lines (time, active and completed "
                         "jobs) on stderr")
    ap.add_argument("--report", action="store_true",
                    help="print a markdown table of the runs in --out and the published ones")
    ap.add_argument("--horizon", nargs="+", metavar="LOG",
                    help="compare unfinished runs from their progress logs (stderr) up to the "
                         "simulated time all reached")
    args = ap.parse_args()
    if args.horizon:
        horizon_report(args.horizon)
        return
    if args.report:
        report(args.out)
        return
    names = args.configs.split(",")
    for n in names:
        if n not in CONFIGS:
            ap.error(f"--configs: unknown {n!r}; known: {', '.join(CONFIGS)}")
    workloads = parse_range(args.workloads)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    done = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            for line in f:
                r = json.loads(line)
                done[r["config"], r["workload"], r["seed"]] = r
    tasks = [(n, w, args.seed, args.progress) for n in names for w in workloads
             if (n, w, args.seed) not in done]
    results = [done[n, w, args.seed] for n in names for w in workloads if (n, w, args.seed) in done]
    for r in results:
        print(json.dumps(r), flush=True)
    # The slowest first (the 10 s period; then the GA policies) so the pool ends together.
    tasks.sort(key=lambda t: -60 / CONFIGS[t[0]]["interval"] - (CONFIGS[t[0]]["policy"] == "pollux"))
    with multiprocessing.Pool(args.jobs, maxtasksperchild=1) as pool:
        for r in pool.imap_unordered(run_one, tasks):
            print(json.dumps(r), flush=True)
            with open(args.out, "a") as f:
                f.write(json.dumps(r) + "\n")
            results.append(r)
    for n in names:
        rs = [r for r in results if r["config"] == n]
        if not rs:
            continue
        mean = {k: sum(r[k] for r in rs) / len(rs) for k in ("avg_jct", "p99_jct", "makespan")}
        print(json.dumps({"config": n, "mean_over_workloads": sorted(r["workload"] for r in rs),
                          **{k: round(v, 1) for k, v in mean.items()}}), flush=True)


if __name__ == "__main__":
    main()
