#!/usr/bin/python3
"""AdaScale on resize (issue #48 item 2, docs/goodput.md): the Fashion-MNIST MLP of
tests/common/job_files.sh (784-64-10, allreduce, batch 64 per worker) with the job file's 1 worker,
resized 1 -> 4 -> 2 -> 8 workers at 1/4, 2/4 and 3/4 of its samples (`troupe scale`), under each
[train] lr_scaling rule, against the same job at a fixed 1 worker over the same epochs. One JSON line
per run: test accuracy, wall seconds, the resizes' times, the job's last goodput report.

  adascale_resize.py TROUPE_BIN [--rules adascale,none,linear,sqrt] [--seeds 1,2,3] [--epochs 4]
                     [--schedule 1,4,2,8] [--optimizer adam|sgd] [--lr 0.001] [--out FILE] [--root DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROWS = 60000


def job_toml(root, name, seed, epochs, rule, optimizer, lr, workers, max_workers, momentum):
    opt = f'optimizer = "{optimizer}"\nlearning_rate = {lr}\n'
    if optimizer == "sgd" and momentum > 0:
        opt += f"momentum = {momentum}\n"
    return f"""[job]
root = "{root}/jobs"
dataset_cache = "{root}/datasets"
strategy = "allreduce"
name = "{name}"
workers = {workers}
min_workers = 1
max_workers = {max_workers}
records_per_task = 500
[model]
type = "mlp"
hidden = [64]
[train]
epochs = {epochs}
batch_size = 64
{opt}seed = {seed}
lr_scaling = "{rule}"
[data]
source = "fashion-mnist"
max_test_rows = 10000
"""


def status(bin_, job_dir):
    r = subprocess.run([bin_, "status", "--json", "--job-dir", job_dir], capture_output=True, text=True)
    try:
        return json.loads(r.stdout) if r.returncode == 0 else None
    except ValueError:
        return None


def run(args, name, rule, seed, schedule):
    root = args.root
    file = os.path.join(root, name + ".toml")
    with open(file, "w") as f:
        f.write(job_toml(root, name, seed, args.epochs, rule, args.optimizer, args.lr, schedule[0],
                         max(schedule), args.momentum))
    job_dir = os.path.join(root, "jobs", name)
    shutil.rmtree(job_dir, ignore_errors=True)
    t0 = time.time()
    out = open(os.path.join(root, name + ".out"), "w")
    p = subprocess.Popen([args.bin, "run", file, "--job-id", name, "--quiet"], stdout=out, stderr=subprocess.STDOUT)
    total = args.epochs * ROWS
    resizes, last = [], None
    step = 1
    while p.poll() is None:
        time.sleep(0.2)
        st = status(args.bin, job_dir)
        if st is None:
            continue
        last = st.get("goodput", last)
        if step < len(schedule) and st.get("samples_total", 0) >= total * step / len(schedule):
            r = subprocess.run([args.bin, "scale", "--workers", str(schedule[step]), "--job-dir", job_dir],
                               capture_output=True, text=True)
            resizes.append({"t": round(time.time() - t0, 2), "samples": st.get("samples_total"),
                            "workers": schedule[step], "ok": r.returncode == 0})
            step += 1
    wall = time.time() - t0
    try:
        with open(os.path.join(job_dir, "result.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {}
    rec = {"bench": "adascale_resize", "name": name, "rule": rule, "seed": seed, "epochs": args.epochs,
           "optimizer": args.optimizer, "lr": args.lr, "schedule": schedule, "status": res.get("status"),
           "test_accuracy": res.get("test_accuracy"), "test_loss": res.get("test_loss"),
           "wall_seconds": round(wall, 2), "resizes": resizes,
           "progress": (last or {}).get("progress"), "noise_scale": (last or {}).get("noise_scale"),
           "lr_factor": (last or {}).get("lr_factor"), "gain": (last or {}).get("gain")}
    print(json.dumps(rec), flush=True)
    if args.out:
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("--rules", default="adascale,none,linear,sqrt")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--schedule", default="1,4,2,8")
    ap.add_argument("--optimizer", default="adam")
    ap.add_argument("--lr", type=float, default=0.001)
    ap.add_argument("--momentum", type=float, default=0.0)
    ap.add_argument("--no-fixed", action="store_true", help="skip the fixed-size reference runs")
    ap.add_argument("--out", default="")
    ap.add_argument("--root", default="")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    args.root = args.root or tempfile.mkdtemp(prefix="troupe-adascale-")
    os.makedirs(args.root, exist_ok=True)
    schedule = [int(x) for x in args.schedule.split(",")]
    for seed in [int(s) for s in args.seeds.split(",")]:
        if not args.no_fixed:
            run(args, f"fixed-s{seed}", "none", seed, [schedule[0]])
        for rule in [r for r in args.rules.split(",") if r]:
            run(args, f"{rule}-s{seed}", rule, seed, schedule)
    return 0


if __name__ == "__main__":
    sys.exit(main())
