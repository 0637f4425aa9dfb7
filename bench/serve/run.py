#!/usr/bin/env python3
"""The serving benchmark (docs/benchmarks.md, "Serving"): `troupe serve` against the server a
PyTorch user writes instead (FastAPI + uvicorn workers under gunicorn, bench/serve/peer_server.py),
the same model.pt, endpoint, JSON and threads per worker, driven by the same load generators, in
one run on one machine.

  bench/serve/run.py [--build build/release] [--replicas 1] [--threads 1] [--model fmnist]
                     [--seconds 5] [--out DIR] [--skip-events]

Steps (each prints a JSON line; the last line sums them up):
  forward    the model's own forward time, 1 row: libtorch in a tight loop (serve_forward_bench)
  peak       closed loop, wrk with bench/serve/post.lua at 1..256 connections: the most requests/s
             whose p99 stays <= 20 ms, for each server
  open       open loop (serve_openloop, fixed rate, latency from the scheduled send) at 25/50/75%
             of the peer's peak: p50 and p99 of each server
  low        open loop at 50 requests/s: troupe's single-row p50 against the forward time
  events     troupe with 2 replicas at a fixed rate (50% of the peer's peak at most): a replica
             SIGKILLed, then a hot swap; p99 during each event against p99 outside them
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url, proc, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise SystemExit(f"server exited {proc.returncode} before it was ready ({url})")
        try:
            with urllib.request.urlopen(url + "/v2/health/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:  # noqa: BLE001
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} not ready in {timeout} s")


def to_ms(text):
    m = re.match(r"([\d.]+)(us|ms|s)", text)
    v, unit = float(m.group(1)), m.group(2)
    return v / 1000 if unit == "us" else v * 1000 if unit == "s" else v


def tree_cpu(pid):
    """CPU seconds (user + system) of `pid` and every process below it."""
    total, todo = 0.0, [pid]
    tick = os.sysconf("SC_CLK_TCK")
    while todo:
        p = todo.pop()
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
            # Any thread may have forked (the launcher forks on a thread of its own).
            for t in os.listdir(f"/proc/{p}/task"):
                todo += [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
        except OSError:
            pass
    return total


def wrk_figures(out):
    """requests/s, p50 and p99 (ms) and errors (non-2xx and socket errors) of a finished `wrk --latency`."""
    text = out.stdout
    if "Requests/sec" not in text:
        raise SystemExit(f"wrk failed: {out.stdout} {out.stderr}")
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
    p50 = to_ms(re.search(r"\s50%\s+(\S+)", text).group(1))
    p99 = to_ms(re.search(r"\s99%\s+(\S+)", text).group(1))
    errors = 0
    if m := re.search(r"Non-2xx or 3xx responses: (\d+)", text):
        errors += int(m.group(1))
    if m := re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text):
        errors += sum(int(x) for x in m.groups())
    return rps, p50, p99, errors


def wrk(url, body, connections, seconds, pid=None):
    cpu0 = tree_cpu(pid) if pid else 0
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{int(seconds)}s", "--latency", "-s",
                          os.path.join(HERE, "post.lua"), url],
                         env=dict(os.environ, BODY_FILE=body), capture_output=True, text=True, timeout=seconds + 60)
    rps, p50, p99, errors = wrk_figures(out)
    requests_done = int(re.search(r"(\d+) requests in", out.stdout).group(1))
    cpu_us = (tree_cpu(pid) - cpu0) * 1e6 / max(1, requests_done) if pid else None
    return {"connections": connections, "rps": rps, "p50_ms": p50, "p99_ms": p99, "errors": errors,
            "server_cpu_us_per_request": round(cpu_us, 1) if cpu_us is not None else None}


def peak(url, body, seconds, pid, bound_ms=20.0):
    """The most requests/s with p99 <= bound over connection counts (closed loop)."""
    best, runs = None, []
    for c in (1, 2, 4, 8, 16, 32, 64, 128, 256):
        r = wrk(url, body, c, seconds, pid)
        runs.append(r)
        log(f"  wrk -c {c}: {r['rps']:.0f} req/s, p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, errors {r['errors']}, "
            f"server CPU {r['server_cpu_us_per_request']} us/request")
        if r["p99_ms"] <= bound_ms and r["errors"] == 0 and (best is None or r["rps"] > best["rps"]):
            best = r
        if r["p99_ms"] > 4 * bound_ms and c >= 8:
            break
    if best is None:  # nothing met the bound (a loaded machine): the fastest run, marked
        best = dict(max(runs, key=lambda r: r["rps"]), met_bound=False)
    return best, runs


def openloop(build, url, body, rate, seconds, trace=None, connections=512, extra=()):
    args = [os.path.join(build, "bench", "serve", "serve_openloop"), "--url", url, "--body", body, "--rate",
            str(rate), "--seconds", str(seconds), "--connections", str(connections), *extra]
    if trace:
        args += ["--trace", trace]
    out = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def start_troupe(build, model_dir, root, name, replicas, threads, port, extra=()):
    log_file = open(os.path.join(root, f"troupe-{name}.log"), "w")
    p = subprocess.Popen([os.path.join(build, "troupe"), "serve", model_dir, "--name", name, "--root", root,
                          "--listen", f"127.0.0.1:{port}", "--replicas", str(replicas), "--threads", str(threads),
                          "--quiet", *extra], stdout=log_file, stderr=subprocess.STDOUT)
    return p


def start_peer(model_dir, name, workers, threads, port, root):
    log_file = open(os.path.join(root, "peer.log"), "w")
    env = dict(os.environ, MODEL_DIR=model_dir, MODEL_NAME=name, TORCH_THREADS=str(threads),
               OMP_NUM_THREADS=str(threads))
    return subprocess.Popen(["gunicorn", "-w", str(workers), "-k", "uvicorn.workers.UvicornWorker", "-b",
                             f"127.0.0.1:{port}", "--chdir", HERE, "--log-level", "warning", "peer_server:app"],
                            env=env, stdout=log_file, stderr=subprocess.STDOUT)


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def window_p99(trace, a, b):
    lat = sorted(float(line.split("\t")[1]) for line in open(trace)
                 if a <= float(line.split("\t")[0]) <= b)
    return (lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")), len(lat)


def events(build, models, root, model, threads, rate, body, extra=()):
    """2 replicas at `rate`: a SIGKILL at 4 s, a hot swap at 10 s; p99 in each event's window.
    `extra`: more `troupe serve` flags (--device cuda)."""
    port = free_port()
    srv = start_troupe(build, os.path.join(models, model), root, "events", 2, threads, port, extra)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, srv)
        trace = os.path.join(root, "events.tsv")
        gen = subprocess.Popen([os.path.join(build, "bench", "serve", "serve_openloop"), "--url",
                                f"{url}/v2/models/events/infer", "--body", body, "--rate", str(rate), "--seconds",
                                "18", "--warmup", "1", "--trace", trace], stdout=subprocess.PIPE, text=True)
        t_start = time.time() + 1  # the generator's measurement starts after its 1 s warm-up
        time.sleep(5)
        state = json.load(open(os.path.join(root, "serve", "events", "server.json")))
        victim = [r for r in state["replicas"] if r["state"] == "ready"][0]
        kill_at = time.time() - t_start
        os.kill(victim["pid"], signal.SIGKILL)
        # The replacement serves again when server.json lists two ready replicas.
        while True:
            time.sleep(0.05)
            s = json.load(open(os.path.join(root, "serve", "events", "server.json")))
            if sum(1 for r in s["replicas"] if r["state"] == "ready") == 2 and s["restarts"] >= 1:
                break
        back_at = time.time() - t_start
        time.sleep(max(0.0, 11 - (time.time() - t_start)))
        swap_at = time.time() - t_start
        other = os.path.join(root, "model-copy")
        shutil.rmtree(other, ignore_errors=True)
        shutil.copytree(os.path.join(models, model), other)
        meta = json.load(open(os.path.join(other, "model.json")))
        meta["created_unix_ms"] += 1
        meta["job"]["id"] += "-v2"
        json.dump(meta, open(os.path.join(other, "model.json"), "w"))
        subprocess.run([os.path.join(build, "troupe"), "serve", "reload", "--root", root, "--name", "events", other],
                       check=True, capture_output=True, timeout=120)
        swapped_at = time.time() - t_start
        summary = json.loads(gen.communicate(timeout=120)[0].strip().splitlines()[-1])
    finally:
        stop(srv)
    # Windows: the event and the 0.5 s after it; outside: everything else.
    kill_p99, kill_n = window_p99(trace, kill_at, back_at + 0.5)
    swap_p99, swap_n = window_p99(trace, swap_at, swapped_at + 0.5)
    lat = []
    for line in open(trace):
        t, ms, _ = line.split("\t")
        t = float(t)
        if not (kill_at <= t <= back_at + 0.5 or swap_at <= t <= swapped_at + 0.5):
            lat.append(float(ms))
    lat.sort()
    return {"rate": rate, "requests": summary["requests"], "errors": summary["errors"],
            "p99_outside_ms": lat[int(0.99 * (len(lat) - 1))] if lat else None,
            "kill": {"replaced_after_s": round(back_at - kill_at, 3), "requests": kill_n, "p99_ms": kill_p99},
            "swap": {"took_s": round(swapped_at - swap_at, 3), "requests": swap_n, "p99_ms": swap_p99}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(SOURCE, "build", "release"))
    ap.add_argument("--replicas", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--model", default="fmnist")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--out", default=None)
    ap.add_argument("--skip-events", action="store_true")
    a = ap.parse_args()
    out = a.out or os.path.join(a.build, "bench", "serve", "run")
    os.makedirs(out, exist_ok=True)
    models = os.path.join(out, "models")
    if not os.path.exists(os.path.join(models, a.model, "model.pt")):
        subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "tests", "serve", "make_models.py"), models, "--bench"],
                       check=True)
    ref = json.load(open(os.path.join(models, a.model, "reference.json")))
    body = os.path.join(out, "body.json")
    row = ref["dense"][0]
    inputs = [{"name": "dense", "datatype": "FP32", "shape": [1, len(row)], "data": row}]
    if "ids" in ref:
        inputs.append({"name": "ids", "datatype": "INT64", "shape": [1, len(ref["ids"][0])], "data": ref["ids"][0]})
    json.dump({"inputs": inputs}, open(body, "w"))
    results = {"machine": f"{os.cpu_count()} CPUs", "load_average_at_start": os.getloadavg()[0], "model": a.model,
               "replicas": a.replicas, "threads": a.threads}

    fwd = subprocess.run([os.path.join(a.build, "bench", "serve", "serve_forward_bench"), os.path.join(models, a.model),
                          "--threads", str(a.threads), "--rows", "1"], capture_output=True, text=True, check=True)
    results["forward"] = json.loads(fwd.stdout.strip().splitlines()[-1])
    log(f"forward: {results['forward']}")

    root = os.path.join(out, "jobs")
    os.makedirs(root, exist_ok=True)
    tport, pport = free_port(), free_port()
    troupe = start_troupe(a.build, os.path.join(models, a.model), root, a.model, a.replicas, a.threads, tport)
    peer = start_peer(os.path.join(models, a.model), a.model, a.replicas, a.threads, pport, out)
    try:
        turl, purl = f"http://127.0.0.1:{tport}", f"http://127.0.0.1:{pport}"
        wait_ready(turl, troupe)
        wait_ready(purl, peer)
        infer = f"/v2/models/{a.model}/infer"
        for who, url, pid in (("troupe", turl, troupe.pid), ("peer", purl, peer.pid)):
            log(f"peak {who}:")
            best, runs = peak(url + infer, body, a.seconds, pid)
            results[f"{who}_peak"] = best
            results[f"{who}_wrk"] = runs
        peer_peak = results["peer_peak"]["rps"]
        results["open"] = []
        for frac in (0.25, 0.5, 0.75):
            rate = round(frac * peer_peak)
            row = {"fraction": frac, "rate": rate}
            for who, url in (("troupe", turl), ("peer", purl)):
                row[who] = openloop(a.build, url + infer, body, rate, max(5.0, a.seconds))
            log(f"open {frac:.0%} of the peer's peak ({rate}/s): troupe p50 {row['troupe']['p50_ms']:.2f} p99 "
                f"{row['troupe']['p99_ms']:.2f} ms; peer p50 {row['peer']['p50_ms']:.2f} p99 {row['peer']['p99_ms']:.2f} ms")
            results["open"].append(row)
        low = {who: openloop(a.build, url + infer, body, 50, 10) for who, url in (("troupe", turl), ("peer", purl))}
        results["low"] = low
        results["low"]["troupe_p50_minus_forward_us"] = round(low["troupe"]["p50_ms"] * 1000 -
                                                              results["forward"]["p50_us"], 1)
        log(f"low load: troupe p50 {low['troupe']['p50_ms'] * 1000:.0f} us, peer {low['peer']['p50_ms'] * 1000:.0f} us, "
            f"forward {results['forward']['p50_us']:.0f} us")
    finally:
        stop(troupe)
        stop(peer)
    if not a.skip_events:
        rate = min(500, round(0.5 * results["peer_peak"]["rps"]))
        results["events"] = events(a.build, models, root, a.model, a.threads, rate, body)
        log(f"events: {results['events']}")
    results["speedup_at_p99_20ms"] = round(results["troupe_peak"]["rps"] / results["peer_peak"]["rps"], 2)
    results["load_average_at_end"] = os.getloadavg()[0]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
