#!/usr/bin/python3
"""Figure of the control-plane bench (bench/control/run.sh): leases/s and lease latency p99 of
troupe's master and of etcd at each N, and the time for a death to reach every member. Written as
PNG with a JSON file of exactly the series it plots beside it.

Usage: plots.py control.json --out DIR    (python3-matplotlib)
"""
import argparse
import json
import os
import sys


def load(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                r = json.loads(line)
            except ValueError as e:
                sys.exit(f"{path}:{n}: not a JSON object: {e}")
            for key in ("system", "workers", "leases_per_s", "lease_p99_ms"):
                if key not in r:
                    sys.exit(f"{path}:{n}: no '{key}'")
            rows.append(r)
    if not rows:
        sys.exit(f"{path}: no runs")
    return rows


def series(rows):
    out = {}
    for sysname in ("troupe", "etcd"):
        rs = sorted((r for r in rows if r["system"] == sysname), key=lambda r: r["workers"])
        out[sysname] = {
            "workers": [r["workers"] for r in rs],
            "leases_per_s": [r["leases_per_s"] for r in rs],
            # No lease in the window (etcd at 1,000 clients): no latency to plot.
            "lease_p50_ms": [r.get("lease_p50_ms") if r["leases_per_s"] > 0 else None for r in rs],
            "lease_p99_ms": [r["lease_p99_ms"] if r["leases_per_s"] > 0 else None for r in rs],
        }
        if sysname == "troupe":
            out[sysname]["death_last_ms"] = [r.get("death_last_ms") for r in rs]
            out[sysname]["death_view_bytes"] = [r.get("death_view_bytes") for r in rs]
            out[sysname]["master_rss_bytes_per_worker"] = [r.get("master_rss_bytes_per_worker") for r in rs]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("run")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    s = series(load(a.run))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "control_plot.json"), "w") as f:
        json.dump(s, f, indent=1)
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    nan = float("nan")
    fix = lambda xs: [nan if x is None else x for x in xs]
    for name, st in (("troupe", "o-"), ("etcd", "s--")):
        d = {k: fix(v) if k != "workers" else v for k, v in s[name].items()}
        if not d["workers"]:
            continue
        ax[0].plot(d["workers"], d["leases_per_s"], st, label=name)
        ax[1].plot(d["workers"], d["lease_p99_ms"], st, label=name + " p99")
        ax[1].plot(d["workers"], d["lease_p50_ms"], st, alpha=0.5, label=name + " p50")
    d = {k: fix(v) if k != "workers" else v for k, v in s["troupe"].items()}
    if d["workers"]:
        ax[2].plot(d["workers"], d["death_last_ms"], "o-", label="troupe: last member sees the death")
    ax[0].set_title("leases/s (one master / one etcd)")
    ax[1].set_title("lease latency (ms)")
    ax[2].set_title("one worker dies: every member knows (ms)")
    for x in ax:
        x.set_xscale("log")
        x.set_xlabel("workers")
        x.grid(True, alpha=0.3)
        x.legend()
    ax[1].set_yscale("log")
    fig.tight_layout()
    fig.savefig(os.path.join(a.out, "control.png"), dpi=110)


if __name__ == "__main__":
    main()
