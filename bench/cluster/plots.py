#!/usr/bin/python3
"""Figures and summaries of the cluster experiments (bench/cluster/experiments.py; the JSON schema
is in docs/cluster_experiments.md). Every figure is written as PNG and SVG, with a JSON file of
exactly the series it plots beside them.

Usage: plots.py RUN.json [RUN.json ...] --out DIR    (python3-matplotlib)
"""
import argparse
import json
import math
import os
import sys


class BadRun(ValueError):
    pass


def check(run):
    """A clear error naming what is wrong with a run file, instead of a traceback later."""
    for key in ("experiment", "mode", "cluster_cpus", "allocations", "jobs"):
        if key not in run:
            raise BadRun(f"run file has no '{key}'")
    if not run["cluster_cpus"] or run["cluster_cpus"] <= 0:
        raise BadRun(f"cluster_cpus must be positive, not {run['cluster_cpus']}")
    for a in run["allocations"]:
        if a.get("start") is not None and a.get("end") is not None and a["end"] < a["start"]:
            raise BadRun(f"allocation {a.get('name', a.get('slurm_job'))} ends ({a['end']}) before it starts ({a['start']})")


def window(run):
    """[first submission, last job end] (co-location: the service pattern's span)."""
    if run.get("pattern_end"):
        return 0.0, float(run["pattern_end"])
    jobs = run["jobs"]
    ends = [j["end"] for j in jobs if j.get("end") is not None]
    lo = min((j["submit"] for j in jobs), default=0.0)
    return lo, max(ends) if ends else float(run.get("t_end", lo))


def intervals(run):
    """(owner, cpus, start, end) of every allocation that ran, clipped at t_end."""
    t_end = float(run.get("t_end", 0))
    out = []
    for a in run["allocations"]:
        if a.get("start") is None:
            continue
        end = a["end"] if a.get("end") is not None else t_end
        out.append((a["owner"], int(a["cpus"]), float(a["start"]), float(end)))
    return out


def allocated_cpu_seconds(run, lo, hi):
    return sum(c * max(0.0, min(e, hi) - max(s, lo)) for _, c, s, e in intervals(run))


def percentile(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    f = math.floor(k)
    return xs[f] if f == k else xs[f] + (xs[min(f + 1, len(xs) - 1)] - xs[f]) * (k - f)


def summarise(run):
    check(run)
    lo, hi = window(run)
    span = max(hi - lo, 1e-9)
    jct = [j["end"] - j["submit"] for j in run["jobs"] if j.get("end") is not None]
    waits = {j["name"]: (None if j.get("first_step") is None else round(j["first_step"] - j["submit"], 3))
             for j in run["jobs"]}
    samples = [s["allocated"] / s["total"] for s in run.get("sinfo", []) if lo <= s["t"] <= hi and s["total"]]
    out = {"makespan_s": round(span, 3), "jobs": len(run["jobs"]), "jobs_finished":
           sum(1 for j in run["jobs"] if (j.get("result") or {}).get("status") == "finished"),
           "avg_jct_s": round(sum(jct) / len(jct), 3) if jct else None,
           "p99_jct_s": round(percentile(jct, 99), 3) if jct else None,
           "queueing_delay_s": waits,
           "utilisation": round(allocated_cpu_seconds(run, lo, hi) / (run["cluster_cpus"] * span), 4),
           "utilisation_sinfo": round(sum(samples) / len(samples), 4) if samples else None}
    if run.get("service_latency") is not None:
        ups = [x["seconds"] for x in run["service_latency"] if x["added"] > 2]
        out["service_scale_up_s"] = ups
        out["slurm_own_scale_up_s"] = run.get("slurm_own_latency")
    if run.get("reference"):
        out["reference_auc"] = run["reference"].get("test_auc")
        out["job_auc"] = (run["jobs"][0].get("result") or {}).get("test_auc")
    return out


def step_series(run, step=1.0):
    """Allocated CPUs per owner sampled every `step` s over [0, t_end]."""
    t_end = float(run.get("t_end", 0))
    ts = [i * step for i in range(int(t_end / step) + 2)]
    owners = sorted({o for o, *_ in intervals(run)}, key=lambda o: (o in ("service", "svc-base"), o))
    series = {o: [0] * len(ts) for o in owners}
    for o, c, s, e in intervals(run):
        for i, t in enumerate(ts):
            if s <= t < e:
                series[o][i] += c
    return ts, series


def save(fig, data, out, name):
    os.makedirs(out, exist_ok=True)
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"{name}.{ext}"), dpi=110, bbox_inches="tight")
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(data, f)
    import matplotlib.pyplot as plt
    plt.close(fig)
    return [os.path.join(out, f"{name}.{e}") for e in ("png", "svg", "json")]


def stacked(ax, run, title):
    ts, series = step_series(run)
    colours = {}
    ys = [series[o] for o in series]
    labels = list(series)
    if ys:
        polys = ax.stackplot(ts, *ys, labels=labels, step="post", alpha=0.85)
        for o, p in zip(labels, polys):
            if o in ("service", "svc-base"):
                p.set_color("0.6")
            colours[o] = p.get_facecolor()
    ax.axhline(run["cluster_cpus"], ls="--", color="k", lw=1)
    ax.set_ylabel("allocated CPUs")
    ax.set_ylim(0, run["cluster_cpus"] * 1.1)
    ax.set_title(title, fontsize=10)
    if len(labels) <= 12:
        ax.legend(loc="upper right", fontsize=7, ncol=2)
    return {"t": ts, "cpus": series}


def fig_allocation(run, out, prefix):
    import matplotlib.pyplot as plt
    s = summarise(run)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    data = stacked(ax, run, f"{run['experiment']} / {run['mode']}: allocated CPUs per job "
                   f"(utilisation {100 * s['utilisation']:.1f}% over {s['makespan_s']:.0f} s)")
    if run.get("service"):
        sv = run["service"]
        ax.step([x["t"] for x in sv], [x["replicas_wanted"] for x in sv], where="post", color="k", lw=1.5,
                label="service replicas wanted")
        ax.legend(loc="upper right", fontsize=7, ncol=2)
        data["service"] = sv
    ax.set_xlabel("seconds")
    return save(fig, data, out, f"{prefix}_allocation")


def fig_utilisation(run, out, prefix):
    import matplotlib.pyplot as plt
    s = summarise(run)
    ts, series = step_series(run)
    util = [sum(v[i] for v in series.values()) / run["cluster_cpus"] for i in range(len(ts))]
    fig, ax = plt.subplots(figsize=(9, 2.8))
    ax.plot(ts, [100 * u for u in util], lw=1.2, label="sacct allocations")
    sinfo = run.get("sinfo", [])
    if sinfo:
        ax.plot([x["t"] for x in sinfo], [100 * x["allocated"] / x["total"] for x in sinfo], lw=0.8, alpha=0.7,
                label="sinfo samples")
    lo, hi = window(run)
    ax.hlines(100 * s["utilisation"], lo, hi, colors="r", linestyles="--",
              label=f"average {100 * s['utilisation']:.1f}%")
    ax.set_ylim(0, 105)
    ax.set_ylabel("utilisation %")
    ax.set_xlabel("seconds")
    ax.legend(fontsize=7, loc="lower center")
    return save(fig, {"t": ts, "utilisation": util, "sinfo": sinfo, "average": s["utilisation"]}, out,
                f"{prefix}_utilisation")


MARKS = {"join": "green", "preempted": "orange", "died": "red", "leave": "red", "fenced": "purple",
         "replaced": "blue"}


def fig_jobs(run, out, prefix):
    import matplotlib.pyplot as plt
    jobs = [j for j in run["jobs"] if j.get("timeline")]
    if not jobs or len(jobs) > 4:
        return []
    fig, axes = plt.subplots(2, len(jobs), figsize=(4.6 * len(jobs), 4.4), sharex=True, squeeze=False)
    data = {}
    for k, j in enumerate(jobs):
        tl = j["timeline"]
        t = [x["t"] for x in tl]
        top, bottom = axes[0][k], axes[1][k]
        top.plot(t, [x["samples_per_s"] for x in tl], lw=1)
        top.set_title(f"{j['name']}: samples/s (workers: grey)", fontsize=9)
        tw = top.twinx()
        tw.step(t, [x["workers"] for x in tl], where="post", color="0.5", lw=0.8)
        loss = [(x["t"], x["loss"]) for x in tl if x.get("loss") is not None]
        bottom.plot([a for a, _ in loss], [b for _, b in loss], lw=1, color="C1")
        bottom.set_title("training loss", fontsize=9)
        bottom.set_xlabel("seconds")
        for e in j.get("events", []):
            if e["kind"] in MARKS:
                top.axvline(e["t"], color=MARKS[e["kind"]], lw=0.4, alpha=0.5)
        for ax in (top, bottom):
            ax.axvline(j["submit"], color="k", ls=":", lw=1)
            if j.get("first_step") is not None:
                ax.axvline(j["first_step"], color="k", ls="--", lw=1)
        data[j["name"]] = {"timeline": tl, "events": [e for e in j.get("events", []) if e["kind"] in MARKS],
                           "submit": j["submit"], "first_step": j.get("first_step")}
    fig.suptitle(f"{run['experiment']} / {run['mode']}: submit (dotted), first step (dashed); "
                 "join green, preempted orange, died red, fenced purple", fontsize=9)
    return save(fig, data, out, f"{prefix}_jobs")


def fig_compare(gang, elastic, out, name):
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    sg, se = summarise(gang), summarise(elastic)
    dg = stacked(axes[0], gang, f"gang: makespan {sg['makespan_s']:.0f} s, utilisation {100 * sg['utilisation']:.1f}%")
    de = stacked(axes[1], elastic, f"elastic: makespan {se['makespan_s']:.0f} s, utilisation "
                 f"{100 * se['utilisation']:.1f}%")
    axes[1].set_xlabel("seconds")
    files = save(fig, {"gang": dg, "elastic": de}, out, f"{name}_allocation")
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names = sorted(set(sg["queueing_delay_s"]) | set(se["queueing_delay_s"]))
    bars = [("makespan", sg["makespan_s"], se["makespan_s"]), ("avg JCT", sg["avg_jct_s"], se["avg_jct_s"])]
    if len(names) <= 4:
        bars += [(f"wait {n}", sg["queueing_delay_s"].get(n) or 0, se["queueing_delay_s"].get(n) or 0)
                 for n in names]
    else:
        bars.append(("p99 JCT", sg["p99_jct_s"], se["p99_jct_s"]))
    xs = range(len(bars))
    ax.bar([x - 0.2 for x in xs], [b[1] or 0 for b in bars], 0.4, label="gang", color="0.55")
    ax.bar([x + 0.2 for x in xs], [b[2] or 0 for b in bars], 0.4, label="elastic (troupe)", color="C0")
    for x, b in zip(xs, bars):
        for dx, v in ((-0.2, b[1]), (0.2, b[2])):
            ax.text(x + dx, (v or 0) + 1, f"{v or 0:.0f}", ha="center", fontsize=7)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([b[0] for b in bars], fontsize=8)
    ax.set_ylabel("seconds")
    ax.legend(fontsize=8)
    files += save(fig, {"bars": bars}, out, f"{name}_times")
    if len(gang["jobs"]) > 4:
        fig, ax = plt.subplots(figsize=(6, 3.2))
        data = {}
        for label, run in (("gang", gang), ("elastic (troupe)", elastic)):
            jct = sorted(j["end"] - j["submit"] for j in run["jobs"] if j.get("end") is not None)
            ax.step(jct, [(i + 1) / len(jct) for i in range(len(jct))], where="post", label=label)
            data[label] = jct
        ax.set_xlabel("job completion time (s)")
        ax.set_ylabel("fraction of jobs")
        ax.legend(fontsize=8)
        files += save(fig, data, out, f"{name}_jct_cdf")
    return files


def plot_runs(runs, out):
    import matplotlib
    matplotlib.use("Agg")
    files = []
    for r in runs:
        check(r)
        prefix = f"{r['experiment']}_{r['mode']}"
        files += fig_allocation(r, out, prefix) + fig_utilisation(r, out, prefix) + fig_jobs(r, out, prefix)
    by = {(r["experiment"], r["mode"]): r for r in runs}
    for exp in sorted({r["experiment"] for r in runs}):
        if (exp, "gang") in by and (exp, "elastic") in by:
            files += fig_compare(by[(exp, "gang")], by[(exp, "elastic")], out, exp)
    return files


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    runs = []
    for p in args.runs:
        try:
            with open(p) as f:
                run = json.load(f)
            check(run)
        except (OSError, ValueError) as e:
            sys.exit(f"plots.py: {p}: {e}")
        runs.append(run)
    for f in plot_runs(runs, args.out):
        print(f)
    for r in runs:
        print(json.dumps({"experiment": r["experiment"], "mode": r["mode"], **summarise(r)}))


if __name__ == "__main__":
    main()
