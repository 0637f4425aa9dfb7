#!/usr/bin/python3
"""batch = "auto" against fixed batches (issue #48 item 3, docs/goodput.md): the wall time to a target
test accuracy of the Fashion-MNIST MLP (784-64-10, allreduce, Adam, 4 workers).

troupe evaluates a job at its end, so the time to a target is found by sweeping the epochs: each
configuration runs with 1, 2, 3, ... epochs until one run reaches the target; its time to target is
that run's wall time (a run of fewer epochs is the same trajectory cut short: the auto batch decides
at resizes and at data epochs, so its first epochs do not depend on how many follow). Configurations:
fixed global batches of 4 x {64, 128, 256, 512} at the job file's learning rate, and "auto"
(batch_size 64: M0 = 256; lr_scaling = "adascale"). One JSON line per run, then a summary line.

  auto_batch.py TROUPE_BIN [--target 0.84] [--batches 64,128,256,512] [--epochs 1,2,3,4,6,8]
                [--workers 4] [--out FILE] [--root DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def job_toml(root, name, epochs, batch, auto, workers, max_batch):
    extra = f'batch = "auto"\nlr_scaling = "adascale"\nmax_batch = {max_batch}\n' if auto else ""
    return f"""[job]
root = "{root}/jobs"
dataset_cache = "{root}/datasets"
strategy = "allreduce"
name = "{name}"
workers = {workers}
records_per_task = 2000
[model]
type = "mlp"
hidden = [64]
[train]
epochs = {epochs}
batch_size = {batch}
optimizer = "adam"
learning_rate = 0.001
{extra}[data]
source = "fashion-mnist"
max_test_rows = 10000
"""


def events(job_dir):
    """The job's timeline (events.jsonl), a line that does not parse left out; [] without one."""
    out = []
    try:
        with open(os.path.join(job_dir, "events.jsonl")) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def batch_events(job_dir):
    return [{k: e.get(k) for k in ("kind", "t_ms", "choice", "batch", "from", "local_batch", "accum_steps",
                                   "predicted_goodput", "previous_goodput", "measured_goodput", "noise_scale")}
            for e in events(job_dir) if e.get("kind") in ("batch", "batch_measured")]


def run(args, name, epochs, batch, auto):
    root = args.root
    file = os.path.join(root, name + ".toml")
    with open(file, "w") as f:
        f.write(job_toml(root, name, epochs, batch, auto, args.workers, args.max_batch))
    job_dir = os.path.join(root, "jobs", name)
    shutil.rmtree(job_dir, ignore_errors=True)
    t0 = time.time()
    with open(os.path.join(root, name + ".out"), "w") as out:
        subprocess.run([args.bin, "run", file, "--job-id", name, "--quiet"], stdout=out, stderr=subprocess.STDOUT)
    wall = time.time() - t0
    try:
        with open(os.path.join(job_dir, "result.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {}
    rec = {"bench": "auto_batch", "name": name, "config": "auto" if auto else f"fixed-{batch}",
           "epochs": epochs, "workers": args.workers, "status": res.get("status"),
           "test_accuracy": res.get("test_accuracy"), "wall_seconds": round(wall, 2),
           "train_seconds": res.get("wall_seconds"), "batch_events": batch_events(job_dir) if auto else []}
    print(json.dumps(rec), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("--target", type=float, default=0.84)
    ap.add_argument("--batches", default="64,128,256,512")
    ap.add_argument("--epochs", default="1,2,3,4,6,8")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--max-batch", type=int, default=4096)
    ap.add_argument("--configs", default="", help="comma-separated: auto and/or fixed-B (default: all)")
    ap.add_argument("--out", default="")
    ap.add_argument("--root", default="")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    args.root = args.root or tempfile.mkdtemp(prefix="troupe-autobatch-")
    os.makedirs(args.root, exist_ok=True)
    configs = [("auto", 64, True)] + [(f"fixed-{b}", int(b), False) for b in args.batches.split(",") if b]
    if args.configs:
        keep = set(args.configs.split(","))
        configs = [c for c in configs if c[0] in keep]
    summary = {}
    for cname, batch, auto in configs:
        for e in [int(x) for x in args.epochs.split(",")]:
            rec = run(args, f"{cname}-e{e}", e, batch, auto)
            if (rec["test_accuracy"] or 0) >= args.target:
                summary[cname] = {"epochs": e, "wall_seconds": rec["wall_seconds"],
                                  "train_seconds": rec["train_seconds"], "test_accuracy": rec["test_accuracy"]}
                break
        else:
            summary[cname] = None
    line = {"bench": "auto_batch_summary", "target": args.target, "time_to_target": summary}
    print(json.dumps(line), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
