#!/usr/bin/env python3
"""HTTP/1.1 pipelining against `troupe serve` and its peer (FastAPI + uvicorn under gunicorn,
bench/serve/peer_server.py), one run, one machine (docs/benchmarks.md, "Serving: pipelined
requests"): wrk with bench/serve/post.lua (one request a write) and bench/serve/pipeline.lua
($DEPTH requests a write) on the same model, body and connections, for each server. `--before BIN`
adds another troupe binary (a build before a change) to the same run.

  bench/serve/pipelined.py [--build build/release] [--before BIN] [--depth 16] [--connections 4]
                           [--seconds 5] [--model fmnist] [--no-peer]

Prints one JSON line: per server, requests/s of both runs (and p50/p99 of the unpipelined one: wrk
times no request of a pipelined write).
"""
import argparse
import json
import os
import subprocess
import sys

import run as serve_bench  # bench/serve/run.py: models, servers, wrk's parsing

HERE = os.path.dirname(os.path.abspath(__file__))


def wrk(url, body, connections, seconds, script, depth):
    out = subprocess.run(["wrk", "-t", "1", "-c", str(connections), "-d", f"{int(seconds)}s", "--latency", "-s",
                          os.path.join(HERE, script), url],
                         env=dict(os.environ, BODY_FILE=body, DEPTH=str(depth)), capture_output=True, text=True,
                         timeout=seconds + 60)
    rps, p50, p99, errors = serve_bench.wrk_figures(out)
    r = {"rps": rps, "errors": errors}
    if depth == 1:  # wrk times a pipelined write by no request of it (it prints 0): not reported
        r["p50_ms"], r["p99_ms"] = p50, p99
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(serve_bench.SOURCE, "build", "release"))
    ap.add_argument("--before", default=None, help="another troupe binary to measure in the same run")
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--model", default="fmnist")
    ap.add_argument("--no-peer", action="store_true", help="leave out FastAPI (not installed: --bench deps)")
    a = ap.parse_args()
    out = os.path.join(a.build, "bench", "serve", "pipelined")
    os.makedirs(out, exist_ok=True)
    models = os.path.join(out, "models")
    if not os.path.exists(os.path.join(models, a.model, "model.pt")):
        subprocess.run(["/usr/bin/python3", os.path.join(serve_bench.SOURCE, "tests", "serve", "make_models.py"),
                        models, "--bench"], check=True)
    ref = json.load(open(os.path.join(models, a.model, "reference.json")))
    body = os.path.join(out, "body.json")
    row = ref["dense"][0]
    json.dump({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, len(row)], "data": row}]},
              open(body, "w"))
    root = os.path.join(out, "jobs")
    os.makedirs(root, exist_ok=True)
    binaries = {"troupe": os.path.join(a.build, "troupe")}
    if a.before:
        binaries["troupe_before"] = a.before
    results = {"machine": f"{os.cpu_count()} CPUs", "model": a.model, "depth": a.depth,
               "connections": a.connections, "seconds": a.seconds}
    servers = []
    try:
        for who, binary in binaries.items():
            port = serve_bench.free_port()
            log_file = open(os.path.join(root, f"{who}.log"), "w")
            # Each under a root of its own: the same --name, the model's, in each.
            own_root = os.path.join(root, who)
            os.makedirs(own_root, exist_ok=True)
            p = subprocess.Popen([binary, "serve", os.path.join(models, a.model), "--name", a.model, "--root", own_root,
                                  "--listen", f"127.0.0.1:{port}", "--replicas", "1", "--threads", "1", "--quiet"],
                                 stdout=log_file, stderr=subprocess.STDOUT)
            servers.append((who, f"http://127.0.0.1:{port}", p))
        if not a.no_peer:
            port = serve_bench.free_port()
            servers.append(("peer", f"http://127.0.0.1:{port}",
                            serve_bench.start_peer(os.path.join(models, a.model), a.model, 1, 1, port, out)))
        for who, url, p in servers:
            serve_bench.wait_ready(url, p)
        for who, url, p in servers:
            infer = url + f"/v2/models/{a.model}/infer"
            one = wrk(infer, body, a.connections, a.seconds, "post.lua", 1)
            piped = wrk(infer, body, a.connections, a.seconds, "pipeline.lua", a.depth)
            results[who] = {"one_per_write": one, "pipelined": piped}
            print(f"{who}: one a write {one['rps']:.0f} req/s (p50 {one['p50_ms']:.2f} ms); {a.depth} a write "
                  f"{piped['rps']:.0f} req/s; errors {one['errors']}/{piped['errors']}", file=sys.stderr, flush=True)
    finally:
        for _, _, p in servers:
            serve_bench.stop(p)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
