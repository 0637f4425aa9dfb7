#!/usr/bin/env python3
"""Serving on the GPU (issue 49 item 3, docs/benchmarks.md): `troupe serve --device cuda` of a trained
model directory, driven by the open-loop generator at rising rates, against the limit any server
approaches: the same model.pt's plain batched forward in PyTorch CUDA (torch.jit.load, no server,
the best batch size) in the same run; then a replica SIGKILLed (and a hot swap) under load.

  bench/serve/gpu.py BUILD MODEL_DIR TEST_PREFIX --root DIR [--rows 1,64] [--replicas 2]
                     [--seconds 3] [--max-batch 256] [--events] [--label NAME]

TEST_PREFIX: records written by bench/job/export_records (the requests' rows come from them).
Run it with a Python whose torch sees CUDA (the peer); troupe's replicas need
TROUPE_TORCHSCRIPT_PLUGIN built against a libtorch with CUDA (bench/device/torch_gpu.sh builds one).
Prints one JSON line per measurement ("bench": "serve_gpu_*") and exits 1 when a server failed,
a request failed around the kill, or no rate met the bound. Without CUDA it prints why and exits 0.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run as serve_run  # noqa: E402  (bench/serve/run.py: the generator, server start, events)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "model"))
from check_model import load as load_records  # noqa: E402

BOUND_MS = 20.0


def emit(row):
    print(json.dumps(row), flush=True)


def write_body(path, meta, dense, ids, rows, binary=False):
    """A request of `rows` rows; binary: the binary tensor data extension (returns the JSON's length
    in bytes, which goes in Inference-Header-Content-Length), else JSON (returns None)."""
    inputs = [{"name": "dense", "datatype": "FP32", "shape": [rows, dense.shape[1]],
               "data": [round(float(v), 6) for v in dense[:rows].reshape(-1)]}]
    if meta["forward"] == ["dense", "ids"]:
        inputs.append({"name": "ids", "datatype": "INT64", "shape": [rows, ids.shape[1]],
                       "data": [int(v) for v in ids[:rows].reshape(-1)]})
    if not binary:
        with open(path, "w") as f:
            json.dump({"inputs": inputs}, f)
        return None
    blobs = [dense[:rows].astype("<f4").tobytes()]
    if len(inputs) > 1:
        blobs.append(ids[:rows].astype("<i8").tobytes())
    for t, b in zip(inputs, blobs):
        del t["data"]
        t["parameters"] = {"binary_data_size": len(b)}
    head = json.dumps({"inputs": inputs}).encode()
    with open(path, "wb") as f:
        f.write(head + b"".join(blobs))
    return len(head)


def forward_peer(torch, device, model_dir, meta, dense, ids, seconds=1.0):
    """Rows/s of model.pt's batched forward on `device` at each batch size: with the rows copied from
    and the outputs back to the host (what a server must do) and with both resident on the device."""
    m = torch.jit.load(os.path.join(model_dir, "model.pt"), map_location=device)
    sync = torch.cuda.synchronize if device != "cpu" else (lambda: None)
    m.eval()
    two = meta["forward"] == ["dense", "ids"]
    best = {"host": (0.0, 0), "resident": (0.0, 0)}
    rows = []
    with torch.no_grad():
        for bs in (1, 16, 64, 256, 1024, 4096, 16384):
            reps = -(-bs // dense.shape[0])
            d = dense.repeat(reps, 1)[:bs].contiguous()
            i = ids.repeat(reps, 1)[:bs].contiguous() if two else None
            dg, ig = d.to(device), (i.to(device) if two else None)
            row = {"batch": bs}
            for how in ("host", "resident"):
                def once():
                    if how == "host":
                        out = m(d.to(device), i.to(device)) if two else m(d.to(device))
                        return out.cpu()
                    out = m(dg, ig) if two else m(dg)
                    return out
                for _ in range(5):
                    once()
                sync()
                n, t0 = 0, time.perf_counter()
                while time.perf_counter() - t0 < seconds / 7:
                    once()
                    n += 1
                sync()
                rate = n * bs / (time.perf_counter() - t0)
                row[f"{how}_rows_per_s"] = round(rate)
                if rate > best[how][0]:
                    best[how] = (rate, bs)
            rows.append(row)
    return {"by_batch": rows, "best_host_rows_per_s": round(best["host"][0]), "best_host_batch": best["host"][1],
            "best_resident_rows_per_s": round(best["resident"][0]), "best_resident_batch": best["resident"][1]}


def sweep(build, url, body, rows, seconds, start_rate, json_bytes=None):
    """Open loop at rates rising by sqrt(2) until p99 passes the bound, a request fails or the rate is
    not reached: the most rows/s with p99 <= 20 ms."""
    runs, best, rate = [], None, start_rate
    while rate <= 256000:
        extra = ("--json-bytes", str(json_bytes)) if json_bytes else ()
        r = serve_run.openloop(build, url, body, rate, seconds, connections=1024, extra=extra)
        r["rows_per_request"] = rows
        r["rows_per_s"] = round(r["achieved"] * rows)
        runs.append(r)
        serve_run.log(f"  {rows} rows x {rate}/s: achieved {r['achieved']}, p50 {r['p50_ms']:.2f} ms, "
                      f"p99 {r['p99_ms']:.2f} ms, errors {r['errors']}")
        ok = r["p99_ms"] <= BOUND_MS and r["errors"] == 0 and r["achieved"] >= 0.9 * rate
        if ok and (best is None or r["rows_per_s"] > best["rows_per_s"]):
            best = r
        if not ok:
            break
        rate = round(rate * 1.4142)
    return best, runs


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("model_dir")
    ap.add_argument("test")
    ap.add_argument("--root", required=True)
    ap.add_argument("--rows", default="1,64")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--max-batch", type=int, default=256)
    ap.add_argument("--http-threads", type=int, default=2, help="[serve] http_threads: the threads that parse JSON")
    ap.add_argument("--events", action="store_true", help="also a replica SIGKILLed and a hot swap under load")
    ap.add_argument("--label", default="model")
    ap.add_argument("--binary", action="store_true", help="also each row count with binary tensor data")
    ap.add_argument("--device", default="cuda", help="cuda (the benchmark) or cpu (a check of this script)")
    a = ap.parse_args()
    import torch
    if a.device != "cpu" and not torch.cuda.is_available():
        print(f"serve_gpu: torch {torch.__version__} sees no CUDA device: nothing to serve on a GPU here")
        return 0
    build, root = os.path.abspath(a.build), os.path.abspath(a.root)
    os.makedirs(root, exist_ok=True)
    meta = json.load(open(os.path.join(a.model_dir, "model.json")))
    dense, ids, _ = load_records(a.test)
    peer = forward_peer(torch, a.device, a.model_dir, meta, dense, ids)
    emit({"bench": "serve_gpu_forward", "model": a.label, "torch": torch.__version__,
          "device": torch.cuda.get_device_name(0) if a.device != "cpu" else "cpu", **peer})

    port = serve_run.free_port()
    url = f"http://127.0.0.1:{port}"
    extra = ("--device", a.device, "--max-batch", str(a.max_batch), "--set", f"serve.http_threads={a.http_threads}")
    srv = serve_run.start_troupe(build, a.model_dir, root, a.label, a.replicas, 1, port, extra)
    failed = 0
    try:
        serve_run.wait_ready(url, srv)
        infer = f"{url}/v2/models/{a.label}/infer"
        for rows, binary in ((int(x), b) for x in a.rows.split(",") for b in ((False, True) if a.binary else (False,))):
            body = os.path.join(root, f"body-{rows}{'.bin' if binary else '.json'}")
            json_bytes = write_body(body, meta, dense.numpy(), ids.numpy() if ids is not None else None, rows, binary)
            best, runs = sweep(build, infer, body, rows, a.seconds, 500 if rows == 1 else 100, json_bytes)
            row = {"bench": "serve_gpu", "model": a.label, "replicas": a.replicas, "max_batch": a.max_batch,
                   "http_threads": a.http_threads, "body": "binary" if binary else "json",
                   "rows_per_request": rows, "bound_ms": BOUND_MS,
                   "rows_per_s_at_bound": best["rows_per_s"] if best else None,
                   "p99_ms_at_bound": best["p99_ms"] if best else None,
                   "vs_forward_host": round(best["rows_per_s"] / peer["best_host_rows_per_s"], 3) if best else None,
                   "runs": [{k: r.get(k) for k in ("rate", "achieved", "rows_per_s", "p50_ms", "p99_ms", "errors")}
                            for r in runs]}
            emit(row)
            failed |= best is None
    finally:
        serve_run.stop(srv)
    log_path = os.path.join(root, f"troupe-{a.label}.log")
    if srv.returncode not in (0, -15, None):
        failed = 1
        serve_run.log(f"troupe serve exited {srv.returncode}; its log: {open(log_path).read()[-2000:]}")
    if a.events:
        body = os.path.join(root, "body-1.json")
        write_body(body, meta, dense.numpy(), ids.numpy() if ids is not None else None, 1)
        models = os.path.dirname(os.path.abspath(a.model_dir))
        ev = serve_run.events(build, models, root, os.path.basename(os.path.abspath(a.model_dir)), 1, 1000, body,
                              extra=extra)
        emit({"bench": "serve_gpu_events", "model": a.label, **ev})
        failed |= ev["errors"] > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
