"""Synchronous jobs for bench/cluster/experiments.py's mixed traces (issue #48): jobs whose throughput
flattens as they grow, which a cluster policy by goodput can tell from the linear async ones.

A sync job: the Fashion-MNIST MLP 784-256-10 (203,530 parameters, 814 KB of gradients per step),
allreduce, `[train] batch = "global"` (the job file's global batch, about SYNC_BATCH, at every size:
strong scaling), each worker paced at SYNC_PACE samples/s. A step is the batch's compute split over
the replicas plus the ring's allreduce, which does not shrink: across hosts whose links
`scripts/hosts.sh limit` shapes (--link-rate), it is what bends the job's speedup. Its length is
set so that at its own workers it takes about as long as the trace's job would (the speedup assumed
for that: 1 / (1/w + R), R = --sync-fraction, which `sync_scaling` measures).

  sync_scaling   one sync job alone on the cluster, resized 1 -> 2 -> 4 -> 8 -> 12 workers by
                 `troupe scale`: its samples/s at each size (the real speedup curve, and R).
"""
import json
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
HOSTS_SH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts", "hosts.sh")
SYNC_PACE = 600    # samples/s per worker (the MLP's ~1.2 MFLOP a sample: ~0.7 GFLOP/s a worker)
SYNC_BATCH = 128   # the global batch (batch = "global")
FASHION_ROWS = 60000


def job_section(root, name, strategy, workers, min_w, max_w, records_per_task):
    """A job file's [job] section (the experiments' jobs, async and sync)."""
    return f"""[job]
root = "{root}"
strategy = "{strategy}"
name = "{name}"
workers = {workers}
min_workers = {min_w}
max_workers = {max_w}
records_per_task = {records_per_task}
"""


def sync_job_toml(root, name, rows, workers, min_w, max_w, pace=SYNC_PACE):
    return job_section(root, name, "allreduce", workers, min_w, max_w, 512) + f"""[model]
type = "mlp"
hidden = [256]
[train]
epochs = {max(1, -(-rows // FASHION_ROWS))}
batch_size = {max(1, SYNC_BATCH // workers)}
batch = "global"
optimizer = "adam"
learning_rate = 0.001
max_samples_per_s = {pace}
[data]
source = "fashion-mnist"
max_train_rows = {min(rows, FASHION_ROWS)}
max_test_rows = 1000
"""


def speedup(workers, sync_fraction):
    """Workers' worth of training at `workers` (1 alone: no sync)."""
    return 1.0 if workers <= 1 else 1.0 / (1.0 / workers + sync_fraction)


def rows_for(seconds, workers, sync_fraction, pace=SYNC_PACE):
    """The rows a sync job trains in `seconds` at `workers` (whole epochs beyond one: 60,000 each)."""
    rows = int(seconds * pace * speedup(workers, sync_fraction))
    return rows if rows <= FASHION_ROWS else FASHION_ROWS * round(rows / FASHION_ROWS)


def limit_links(rate):
    """tc tbf on every host's link (both directions); 'off' removes it."""
    for h in range(1, 5):
        subprocess.run(["bash", HOSTS_SH, "limit", f"h{h}", rate], check=True, capture_output=True)


def status(bin_, job_dir):
    r = subprocess.run([bin_, "status", "--json", "--job-dir", job_dir], capture_output=True, text=True, timeout=20)
    try:
        return json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:
        return None


def measure_at(bin_, job_dir, n, settle=4.0, window=14.0, timeout=120):
    """Once n workers are alive: the median samples/s over `window` seconds (status every second)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        s = status(bin_, job_dir)
        if s and int(s.get("workers_alive", 0)) == n and (s.get("goodput") or {}).get("replicas") == n:
            break
        time.sleep(0.5)
    else:
        return None
    time.sleep(settle)
    rates, hosts = [], set()
    end = time.time() + window
    while time.time() < end:
        s = status(bin_, job_dir) or {}
        if s.get("samples_per_sec"):
            rates.append(float(s["samples_per_sec"]))
        hosts.add((s.get("goodput") or {}).get("hosts"))
        time.sleep(1.0)
    return {"workers": n, "samples_per_s": round(statistics.median(rates), 1) if rates else None,
            "hosts": sorted(h for h in hosts if h), "samples": len(rates)}


def sync_scaling(args, start_elastic, elastic_cluster, fresh_dir, log):
    """The sync job's measured speedup curve on the cluster (module docstring)."""
    work = fresh_dir(os.path.join(args.out, "sync_scaling"))
    text = sync_job_toml(os.path.join(work, "jobs"), "sync", 10 * FASHION_ROWS, 1, 1, 12)
    text += elastic_cluster("h1", spare=False, own_partition="low")
    file = os.path.join(work, "sync.toml")
    with open(file, "w") as f:
        f.write(text)
    runner = start_elastic(args.bin, work, file, "sync")
    job_dir = os.path.join(work, "jobs", "sync")
    points = []
    try:
        for n in (1, 2, 4, 8, 12):
            if n > 1:
                subprocess.run([args.bin, "scale", "--workers", str(n), "--job-dir", job_dir], check=True,
                               capture_output=True, timeout=20)
            p = measure_at(args.bin, job_dir, n)
            log(f"sync_scaling: {n} workers: {p}")
            if p:
                points.append(p)
    finally:
        subprocess.run([args.bin, "stop", "--job-dir", job_dir], capture_output=True, timeout=60)
        runner.wait(timeout=120)
    one = next((p["samples_per_s"] for p in points if p["workers"] == 1 and p["samples_per_s"]), None)
    for p in points:
        if one and p["samples_per_s"]:
            p["speedup"] = round(p["samples_per_s"] / one, 3)
            # 1 / (1/n + R) = speedup  ->  R = 1/speedup - 1/n
            p["sync_fraction"] = round(1 / p["speedup"] - 1 / p["workers"], 3) if p["workers"] > 1 else None
    return [{"experiment": "sync_scaling", "mode": "elastic", "link_rate": args.link_rate, "pace": SYNC_PACE,
             "global_batch": SYNC_BATCH, "points": points, "jobs": []}]
