"""Observability benchmarks (docs/benchmarks.md; prints JSON lines):

overhead  the end-to-end DeepFM job of bench/job (async_ps 2 PS + 4 workers), alternating, several
          repetitions in the same run, in three modes: bare (/metrics off: [cluster] metrics_port =
          -1, nothing attached); served (/metrics on, `troupe dashboard` running, both polled once
          a second by a light client making the page's requests: what the job's machine pays when
          Prometheus and the browser are elsewhere); full (Debian's prometheus scraping /metrics
          every second and headless Chromium showing the dashboard page, on the same machine).
          The timeline is written in every mode: it is part of the job. Target: <= 2%.
paint     `troupe dashboard` over a root of 100 finished jobs (synthetic timelines of 600 events
          each): Chromium's first contentful paint and the time until the job table holds all 100
          rows, from navigation start, over fresh page loads with the cache off. Target: < 1 s.

serve_cost the dashboard process's CPU per poll cycle of the page over the same root.

Usage: /usr/bin/python3 bench/observe/observe_bench.py [--build build/release] [--reps 3] [--only overhead,paint,serve_cost]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "observe"))
sys.path.insert(0, os.path.join(ROOT, "bench", "job"))
from live_job import Browser, Dashboard, free_port, http, wait_for  # noqa: E402
from job_bench import JOB  # noqa: E402


def emit(d):
    print(json.dumps(d), flush=True)


class Poller:
    """What the job's machine serves when Prometheus and the browser are elsewhere: /metrics and
    the page's API requests (job list, new events, nodes, a log tail, result), once a second."""

    def __init__(self, metrics, dashboard, job):
        import threading
        self.stop_ = threading.Event()
        self.requests = 0
        base = dashboard.url + "/api/jobs/" + job

        def loop():
            offset = 0
            while not self.stop_.wait(1.0):
                http("http://" + metrics + "/metrics")
                http(dashboard.url + "/api/jobs")
                status, body = http(base + "/events?after=%d" % offset)
                if status == 200:
                    offset = json.loads(body)["next_offset"]
                for p in ("/nodes", "/log/master?bytes=8192", "/result"):
                    http(base + p)
                self.requests += 6
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def close(self):
        self.stop_.set()
        self.thread.join()


def run_job(troupe, work, name, attached, epochs):
    root = os.path.join(work, "jobs_" + name)
    shutil.rmtree(root, ignore_errors=True)
    path = os.path.join(work, name + ".toml")
    with open(path, "w") as f:
        f.write(JOB.format(name=name, root=root, cache=os.path.join(work, "datasets"), epochs=epochs))
        f.write("\n[cluster]\nmetrics_port = %d\n" % (0 if attached else -1))
    log = open(os.path.join(work, name + ".runner.log"), "w")
    t0 = time.monotonic()
    p = subprocess.Popen([troupe, "run", path, "--job-id", name, "--quiet"], stdout=subprocess.PIPE, stderr=log,
                         text=True)
    extras = []
    try:
        if attached:
            extras = attach(troupe, work, root, name, attached)
        out, _ = p.communicate(timeout=1800)
    finally:
        for x in reversed(extras):
            x.close()
    if p.returncode != 0:
        sys.exit("troupe run failed (rc %d); see %s" % (p.returncode, work))
    res = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    res["external_wall_seconds"] = time.monotonic() - t0
    return res


class Prometheus:
    def __init__(self, work, target):
        d = os.path.join(work, "prometheus")
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        cfg = os.path.join(d, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: troupe\n    honor_labels: true\n"
                    "    static_configs:\n      - targets: ['%s']\n" % target)
        self.log = open(os.path.join(d, "log"), "w")
        self.proc = subprocess.Popen(["prometheus", "--config.file=" + cfg,
                                      "--web.listen-address=127.0.0.1:%d" % free_port(),
                                      "--storage.tsdb.path=" + os.path.join(d, "tsdb")],
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


def attach(troupe, work, root, name, mode):
    """served: the dashboard server and /metrics polled once a second by a light client (viewers
    elsewhere); full: Prometheus on /metrics and Chromium on the dashboard page, on this machine."""
    nodes = os.path.join(root, name, "nodes.json")
    addr = wait_for("metrics_address", lambda: json.load(open(nodes)).get("metrics_address"), 30, 0.02)
    dash = Dashboard(troupe, root, work)
    if mode == "served":
        return [dash, Poller(addr, dash, name)]
    out = [Prometheus(work, addr), dash]
    b = Browser(work)
    out.append(b)
    b.call("Page.navigate", url=out[1].url + "/?job=" + name)
    return out


def overhead(a, troupe, work):
    modes = a.modes.split(",")
    runs = {m: [] for m in modes}
    run_job(troupe, work, "warmup", None, 1)  # imports the dataset into the cache
    for i in range(a.reps):
        for mode in (modes if i % 2 == 0 else list(reversed(modes))):
            res = run_job(troupe, work, "%s_%d" % (mode, i), None if mode == "bare" else mode, a.epochs)
            runs[mode].append(res)
            emit({"bench": "observe_overhead_run", "mode": mode, "rep": i, "wall_seconds": res["wall_seconds"],
                  "samples_per_sec": res["samples_trained"] / res["wall_seconds"], "test_auc": res["test_auc"]})
    med = {m: statistics.median(r["wall_seconds"] for r in v) for m, v in runs.items()}
    out = {"bench": "observe_overhead", "setup": "DeepFM async_ps 2 PS + 4 workers, %d epochs" % a.epochs,
           "reps": a.reps, "target_percent": 2.0}
    for m in modes:
        out[m + "_wall_seconds"] = [r["wall_seconds"] for r in runs[m]]
        out[m + "_median"] = med[m]
        if m != "bare" and "bare" in med:
            out[m + "_overhead_percent"] = 100.0 * (med[m] / med["bare"] - 1)
    emit(out)


def synthetic_root(root, jobs=100, events=600):
    shutil.rmtree(root, ignore_errors=True)
    t0 = int(time.time() * 1000) - 86_400_000
    for j in range(jobs):
        d = os.path.join(root, "job-%03d" % j)
        os.makedirs(os.path.join(d, "logs"))
        open(os.path.join(d, "job.toml"), "w").write('[job]\nname = "job-%03d"\n' % j)
        t = t0 + j * 60_000
        lines = [{"t_ms": t, "kind": "job_start", "strategy": "async_ps", "workers": 4}]
        lines += [{"t_ms": t + 10 + w, "kind": "join", "node": "worker-%d#0" % w, "epoch": w + 1} for w in range(4)]
        for k in range(events - 6):
            lines.append({"t_ms": t + 1000 * (k + 1), "kind": "metrics", "samples": 1000 * k,
                          "loss": 0.7 - k * 0.0005, "samples_per_s": 90000.0, "workers_alive": 4,
                          "tasks_todo": events - k, "tasks_doing": 4, "tasks_done": k, "tasks_requeued": 0,
                          "restarts": 0, "epoch": 5})
        lines.append({"t_ms": t + 1000 * events, "kind": "job_end", "state": "finished"})
        with open(os.path.join(d, "events.jsonl"), "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in lines)
        json.dump({"test_auc": 0.85}, open(os.path.join(d, "result.json"), "w"))


PROBE = """
window.__jobs_ms = null;
new MutationObserver(() => {
  const b = document.querySelector('#jobs tbody');
  if (window.__jobs_ms === null && b && b.rows.length >= %d) window.__jobs_ms = performance.now();
}).observe(document, {subtree: true, childList: true});
"""


def paint(a, troupe, work):
    root = os.path.join(work, "paint_root")
    synthetic_root(root, a.jobs)
    dash = Dashboard(troupe, root, work)
    b = Browser(work)
    try:
        b.call("Page.enable")
        b.call("Network.enable")
        b.call("Network.setCacheDisabled", cacheDisabled=True)
        b.call("Page.addScriptToEvaluateOnNewDocument", source=PROBE % a.jobs)
        fcp, table = [], []
        for i in range(a.paint_reps + 1):
            b.call("Page.navigate", url=dash.url + "/")
            wait_for("all rows", lambda: b.eval("window.__jobs_ms") is not None, 30, 0.02)
            f = wait_for("first contentful paint", lambda: b.eval(
                "performance.getEntriesByName('first-contentful-paint')[0]?.startTime ?? null"), 10, 0.02)
            t = b.eval("window.__jobs_ms")
            if i > 0:  # the first load warms the dashboard's summary cache and Chromium itself
                fcp.append(f)
                table.append(t)
            emit({"bench": "dashboard_paint_run", "load": i, "first_contentful_paint_ms": f,
                  "job_table_filled_ms": t, "counted": i > 0})
        cold = http(dash.url + "/api/jobs")  # sanity: the API lists them all
        assert len(json.loads(cold[1])["jobs"]) == a.jobs
        emit({"bench": "dashboard_paint", "jobs": a.jobs, "loads": len(fcp),
              "first_contentful_paint_ms_median": statistics.median(fcp),
              "job_table_filled_ms_median": statistics.median(table), "job_table_filled_ms_max": max(table),
              "target_ms": 1000})
    finally:
        b.close()
        dash.close()


def cold_list(a, troupe, work):
    """The first /api/jobs of a fresh dashboard (every timeline read once), over the same root."""
    dash = Dashboard(troupe, os.path.join(work, "paint_root"), work)
    try:
        t = time.monotonic()
        http(dash.url + "/api/jobs")
        emit({"bench": "dashboard_first_list", "jobs": a.jobs, "ms": 1000 * (time.monotonic() - t)})
    finally:
        dash.close()


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_cost(a, troupe, work):
    """CPU the dashboard process spends per poll cycle of the page (the six requests it makes each
    second) over the 100-job root, one job's 600 events followed from offset 0 each time (worst
    case); robust where wall-clock comparisons drown in the machine's noise."""
    root = os.path.join(work, "paint_root")
    if not os.path.isdir(root):
        synthetic_root(root, a.jobs)
    dash = Dashboard(troupe, root, work)
    try:
        base = dash.url + "/api/jobs/job-000"
        cycles = 300
        c0, t0 = cpu_seconds(dash.proc.pid), time.monotonic()
        for _ in range(cycles):
            for p in ("/api/jobs", base + "/events?after=0", base + "/nodes", base + "/log/master?bytes=8192",
                      base + "/result"):
                http(p if p.startswith("http") else dash.url + p)
        cpu, wall = cpu_seconds(dash.proc.pid) - c0, time.monotonic() - t0
        emit({"bench": "dashboard_serve_cost", "jobs": a.jobs, "cycles": cycles,
              "cpu_ms_per_cycle": 1000 * cpu / cycles, "wall_ms_per_cycle": 1000 * wall / cycles,
              "share_of_one_core_at_1_hz": cpu / cycles})
    finally:
        dash.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/troupe_observe_bench")
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--paint-reps", type=int, default=5)
    ap.add_argument("--only", default="overhead,paint")
    ap.add_argument("--modes", default="bare,served,full", help="overhead runs: bare, served, full")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    troupe = os.path.join(ROOT, a.build, "troupe")
    only = a.only.split(",")
    if "paint" in only:
        paint(a, troupe, a.work)
        cold_list(a, troupe, a.work)
    if "serve_cost" in only:
        serve_cost(a, troupe, a.work)
    if "overhead" in only:
        overhead(a, troupe, a.work)


if __name__ == "__main__":
    main()
