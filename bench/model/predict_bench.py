#!/usr/bin/python3
"""troupe predict against the loop a PyTorch user writes over the same exported model.pt (issue 46).

    predict_bench.py TROUPE_BIN [--rows N] [--rounds R] [--dir DIR]

Makes a dense CSV (64 numeric columns, a yes/no label), imports 50,000 rows of it, trains an MLP
(64-512-512-256-1, one epoch, allreduce) whose job exports its model, and imports N rows (1,000,000)
to predict as a record store. Then, alternately, R rounds of:
  - troupe predict MODEL --data STORE --out CSV with --workers 1 and --workers 2 (--threads 1 each):
    end to end, the prediction job's start included;
  - the peer: one Python process, torch.set_num_threads(1), torch.jit.load(model.pt), batches of
    1,024 rows of the same records (bench/job/export_records' arrays) through forward under
    torch.no_grad(), sigmoid, and the same CSV written (record number, probability, %.7g).
Both are timed end to end, from the process's start (troupe's job start, Python's and torch's imports);
the peer's loop alone (torch.jit.load to the last line) is reported beside it. Prints one JSON line
per run and a summary line: rows/s of each, and troupe's over the peer's (process and loop).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

PEER = r'''
import sys, time, json, numpy as np, torch
torch.set_num_threads(1)
model, prefix, out = sys.argv[1:4]
meta = json.load(open(prefix + ".json"))
t0 = time.time()
m = torch.jit.load(model); m.eval()
dense = np.fromfile(prefix + ".dense.f32", dtype=np.float32).reshape(meta["rows"], meta["dense_dim"])
x = torch.from_numpy(dense)
with open(out, "w") as f, torch.no_grad():
    f.write("record,probability\n")
    for at in range(0, len(dense), 1024):
        p = torch.sigmoid(m(x[at:at + 1024]).reshape(-1)).numpy()
        f.write("".join("%d,%.7g\n" % (at + i, v) for i, v in enumerate(p)))
print(json.dumps({"rows": len(dense), "seconds": time.time() - t0}))
'''


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def write_csv(path, rows, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 64)).astype(np.float32)
    y = (x[:, 0] - 0.5 * x[:, 1] + x[:, 2] * x[:, 3] > 0)
    with open(path, "w") as f:
        f.write("answer," + ",".join("x%d" % i for i in range(64)) + "\n")
        for i in range(rows):
            f.write(("yes," if y[i] else "no,") + ",".join("%.5g" % v for v in x[i]) + "\n")


def setup(troupe, d, rows):
    if not os.path.exists(d + "/model/model.pt"):
        write_csv(d + "/train.csv", 50000, 1)
        sh([troupe, "data", "import", "csv", d + "/train.csv", "--out", d + "/train", "--label", "answer",
            "--test-fraction", "0.1"])
        with open(d + "/job.toml", "w") as f:
            f.write('[job]\nstrategy = "allreduce"\nworkers = 2\nroot = "%s/jobs"\n[model]\ntype = "mlp"\n'
                    'hidden = [512, 512, 256]\n[train]\nepochs = 1\nbatch_size = 128\noptimizer = "adam"\n'
                    '[data]\nsource = "store"\ntrain = "%s/train/train"\ntest = "%s/train/test"\n' % (d, d, d))
        sh([troupe, "run", d + "/job.toml", "--job-id", "train", "--quiet"])
        os.rename(d + "/jobs/train/model", d + "/model")
    if not os.path.exists(d + "/rows/data.mdb"):
        write_csv(d + "/rows.csv", rows, 2)
        sh([troupe, "data", "import", "csv", d + "/rows.csv", "--out", d + "/rows", "--label", "answer"])
        sh([os.path.join(os.path.dirname(troupe), "bench/job/export_records"), d + "/rows", d + "/rows"])


def troupe_run(troupe, d, workers, n):
    out = "%s/out-%d.csv" % (d, workers)
    shutil.rmtree("%s/jobs/p%d-%d" % (d, workers, n), ignore_errors=True)  # a job id is refused if it exists
    t0 = time.time()
    r = sh([troupe, "predict", d + "/model", "--data", d + "/rows", "--out", out, "--workers", str(workers),
            "--threads", "1", "--root", d + "/jobs", "--job-id", "p%d-%d" % (workers, n), "--quiet"])
    secs = time.time() - t0
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"system": "troupe", "workers": workers, "rows": j["rows"], "seconds": secs, "rows_per_s": j["rows"] / secs}


PYTHON = "/usr/bin/python3"  # the peer's Python (--python: one with numpy and torch)


def peer_run(d):
    # End to end as troupe's runs are (the process's start, Python's and torch's imports included);
    # loop_seconds: from torch.jit.load to the last line written, as the loop alone would time itself.
    t0 = time.time()
    r = sh([PYTHON, "-c", PEER, d + "/model/model.pt", d + "/rows", d + "/out-peer.csv"])
    secs = time.time() - t0
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return {"system": "pytorch", "workers": 1, "rows": j["rows"], "seconds": secs, "rows_per_s": j["rows"] / secs,
            "loop_seconds": j["seconds"], "loop_rows_per_s": j["rows"] / j["seconds"]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troupe")
    p.add_argument("--rows", type=int, default=1000000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--dir", default="/var/tmp/troupe-predict-bench")
    p.add_argument("--workers", type=int, nargs="*", default=[1, 2], help="troupe's runs (the first is the 1x)")
    p.add_argument("--python", default=PYTHON, help="the peer's Python")
    a = p.parse_args()
    globals()["PYTHON"] = a.python
    troupe = os.path.abspath(a.troupe)
    os.makedirs(a.dir, exist_ok=True)
    setup(troupe, a.dir, a.rows)
    runs = {"pytorch": [], "pytorch_loop": []}
    runs.update({w: [] for w in a.workers})
    for n in range(a.rounds):
        order = [("pytorch", None)] + [(w, w) for w in a.workers]
        for key, w in order:
            r = peer_run(a.dir) if w is None else troupe_run(troupe, a.dir, w, n)
            r["round"] = n
            r["load"] = os.getloadavg()[0]
            runs[key].append(r["rows_per_s"])
            if key == "pytorch":
                runs["pytorch_loop"].append(r["loop_rows_per_s"])
            print(json.dumps(r), flush=True)
    peer, loop = statistics.median(runs["pytorch"]), statistics.median(runs["pytorch_loop"])
    summary = {"summary": True, "pytorch_rows_per_s": runs["pytorch"], "pytorch_loop_rows_per_s": runs["pytorch_loop"]}
    for w in a.workers:
        name = "%d_worker%s" % (w, "" if w == 1 else "s")
        summary["troupe_" + name] = runs[w]
        summary["ratio_" + name] = statistics.median(runs[w]) / peer
        summary["ratio_" + name + "_vs_loop"] = statistics.median(runs[w]) / loop
    print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(main())
