#!/usr/bin/env python3
"""From a finished job to answered requests, the two commands of docs/serving.md:

  troupe run job.toml          a small DeepFM (sparse fields only) trained by async PS; the runner
                               writes jobs/<id>/model/ (troupe export)
  troupe serve jobs/<id>/model

then requests through python3-requests: ids of trained rows, of rows never trained and outside every
field's range (zero rows); the answers equal plain PyTorch's (torch.jit.load of the same model.pt) to
1e-5. `troupe jobs prune` keeps the job while the server (started from another directory, on the
model's relative path) serves its model, and removes it once the server stopped.

  serve_job_test.py TROUPE WORK_DIR
"""
import json
import os
import shutil
import subprocess
import sys

import requests
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import Server, TestFailure, close, fail, log  # noqa: E402

JOB = """
[job]
name = "ctr"
strategy = "async_ps"
workers = 2

[ps]
shards = 1

[model]
type = "deepfm"
embedding_dim = 4
hidden = [16]

[train]
epochs = 1
batch_size = 256
optimizer = "adam"
learning_rate = 0.01
seed = 1

[data]
source = "synthetic-ctr"
rows = 20000
test_rows = 2000
fields = 4
vocab_per_field = 50
"""


def main():
    troupe, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    root = os.path.join(work, "jobs")
    with open(os.path.join(work, "job.toml"), "w") as f:
        f.write(JOB)
    run = subprocess.run([troupe, "run", os.path.join(work, "job.toml"), "--set", f"job.root={root}", "--job-id",
                          "ctr1", "--quiet"], capture_output=True, text=True, timeout=300)
    result = json.loads(run.stdout.strip().splitlines()[-1]) if run.stdout.strip() else {}
    if run.returncode != 0 or not result.get("model_dir"):
        fail(f"troupe run: exit {run.returncode}, result {result}\n{run.stderr[-3000:]}")
    model_dir = result["model_dir"]
    log(f"the job wrote {model_dir}")
    with open(os.path.join(model_dir, "model.json")) as f:
        meta = json.load(f)
    fields, buckets = meta["fields"], meta["buckets_per_field"]
    # From the work directory, on the relative path: prune (run elsewhere) must still see it is served.
    srv = Server(troupe, os.path.relpath(model_dir, work), root, "ctr", cwd=work)
    try:
        srv.wait_ready()
        ids = [[f * buckets + (r * 7 + f * 3) % buckets for f in range(fields)] for r in range(8)]
        # Outside their fields' ranges (every field's, or another's: field 2's 3 is field 0's): zero rows,
        # no error (another field's id read that field's row until 2026-12-03).
        ids += [[-5, 10**12, 3, 2 * buckets + 1], [0] * fields]
        body = {"inputs": [{"name": "ids", "datatype": "INT64", "shape": [len(ids), fields], "data": ids}]}
        if meta["dense_dim"]:
            body["inputs"].append({"name": "dense", "datatype": "FP32", "shape": [len(ids), meta["dense_dim"]],
                                   "data": [[0.5] * meta["dense_dim"]] * len(ids)})
        r = requests.post(srv.infer_url(), json=body, timeout=10)
        if r.status_code != 200:
            fail(f"{r.status_code} {r.text}")
        answer = r.json()
        module = torch.jit.load(os.path.join(model_dir, "model.pt"))
        dense = torch.full((len(ids), meta["dense_dim"]), 0.5)
        in_field = [[i if f * buckets <= i < (f + 1) * buckets else -1 for f, i in enumerate(row)] for row in ids]
        want = module(dense, torch.tensor(in_field)).flatten().tolist()
        got = answer["outputs"][0]["data"]
        bad = [(k, g, w) for k, (g, w) in enumerate(zip(got, want)) if not close(g, w)]
        if bad or len(got) != len(want):
            fail(f"served logits differ from PyTorch's: {bad[:5]} ({len(got)} vs {len(want)})")
        if answer["model_version"] != f"ctr1@{meta['created_unix_ms']}":
            fail(f"version {answer['model_version']}")
        log(f"{len(ids)} rows: served logits equal PyTorch's (torch.jit.load of the job's model.pt)")
        # synthetic-ctr has no dense values: the metadata lists 'ids' alone, and a 'dense' tensor
        # of some width (serving.md's first example once sent one) is a 400 saying so.
        names = [t["name"] for t in requests.get(f"{srv.url}/v2/models/ctr", timeout=5).json()["inputs"]]
        if meta["dense_dim"] == 0:
            if names != ["ids"]:
                fail(f"metadata inputs {names}, expected ['ids'] for a model of ids alone")
            body["inputs"].append({"name": "dense", "datatype": "FP32", "shape": [len(ids), 4],
                                   "data": [[0.5] * 4] * len(ids)})
            r = requests.post(srv.infer_url(), json=body, timeout=10)
            if r.status_code != 400 or "reads no dense values" not in r.text:
                fail(f"dense values for a model of ids alone: {r.status_code} {r.text}")
            log("a model of ids alone: metadata lists 'ids' only; dense values are a 400 saying so")
        prune = subprocess.run([troupe, "jobs", "prune", "--older-than", "0s", "--root", root],
                               capture_output=True, text=True, timeout=60)
        if prune.returncode != 0 or "kept ctr1: its model is served by 'ctr'" not in prune.stdout \
                or not os.path.exists(model_dir):
            fail(f"jobs prune while its model is served: exit {prune.returncode}\n{prune.stdout}{prune.stderr}")
        log("jobs prune keeps the job whose model is served")
    finally:
        srv.stop()
    prune = subprocess.run([troupe, "jobs", "prune", "--older-than", "0s", "--root", root],
                           capture_output=True, text=True, timeout=60)
    if prune.returncode != 0 or "removed ctr1" not in prune.stdout or os.path.exists(model_dir):
        fail(f"jobs prune once the server stopped: exit {prune.returncode}\n{prune.stdout}{prune.stderr}")
    log("jobs prune removes it once the server stopped")
    log("ok")


if __name__ == "__main__":
    try:
        main()
    except TestFailure:
        sys.exit(1)
