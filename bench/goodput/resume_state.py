#!/usr/bin/python3
"""What a `batch = "auto"` job keeps across its runner's death (docs/goodput.md, "Every rank holds the
same estimator"; docs/job.md, "Ring checkpoints"): the Fashion-MNIST MLP (784-64-10, allreduce, Adam,
2 workers of 64: M0 = 128; lr_scaling = "adascale"; ring checkpoints every 500 ms; each worker paced
to --pace samples a second, so that the job outlasts the kill) runs until the
controller has chosen a batch other than M0, 1.5 s more, then its runner is SIGKILLed and the job is
resumed (`troupe run --resume`). From the job's timeline (events.jsonl; the resumed run starts at its
second job_start), before the kill and after the resume: the batch in force, the estimate's rounds,
the scale-invariant progress; the seconds the resumed run trained at M0 before it had the batch
it was killed at; and the timeline's batch choices over both runs ([choice, batch, replicas]), with
any choice number written twice. One JSON line per binary given (e.g. a build before the ring
checkpoints kept the controller, then this one).

  resume_state.py TROUPE_BIN [TROUPE_BIN...] [--root DIR] [--max-batch 1024] [--epochs 6] [--pace 10000]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from auto_batch import events  # the script's directory is on sys.path


def job_toml(root, name, epochs, max_batch, pace):
    return f"""[job]
root = "{root}/jobs"
dataset_cache = "{root}/datasets"
strategy = "allreduce"
name = "{name}"
workers = 2
records_per_task = 2000
checkpoint_every_ms = 500
[model]
type = "mlp"
hidden = [64]
[train]
epochs = {epochs}
batch_size = 64
optimizer = "adam"
learning_rate = 0.001
batch = "auto"
lr_scaling = "adascale"
max_batch = {max_batch}
max_samples_per_s = {pace}
[data]
source = "fashion-mnist"
max_test_rows = 10000
"""


def metrics(evs):
    return [e for e in evs if e.get("kind") == "metrics" and e.get("batch")]


def run(binary, root, name, epochs, max_batch, pace):
    file = os.path.join(root, name + ".toml")
    with open(file, "w") as f:
        f.write(job_toml(root, name, epochs, max_batch, pace))
    job_dir = os.path.join(root, "jobs", name)
    log = open(os.path.join(root, name + ".out"), "w")
    runner = subprocess.Popen([binary, "run", file, "--job-id", name, "--quiet"], stdout=log,
                              stderr=subprocess.STDOUT)
    deadline = time.time() + 300
    chosen = None
    while time.time() < deadline and runner.poll() is None:
        ch = [e for e in events(job_dir) if e.get("kind") == "batch" and e.get("batch") != 128]
        if ch:
            chosen = ch[-1]
            break
        time.sleep(0.1)
    if chosen is None:
        runner.kill()
        return {"bench": "resume_state", "bin": binary, "error": "no batch other than M0 was chosen"}
    time.sleep(1.5)
    before = metrics(events(job_dir))[-1]
    runner.send_signal(signal.SIGKILL)
    runner.wait()
    time.sleep(1.0)  # the nodes follow their runner (parent-death signal)
    t0 = time.time()
    rc = subprocess.run([binary, "run", "--resume", job_dir, "--quiet"], stdout=log, stderr=subprocess.STDOUT).returncode
    wall = time.time() - t0
    evs = events(job_dir)
    starts = [i for i, e in enumerate(evs) if e.get("kind") == "job_start"]
    after = metrics(evs[starts[-1]:]) if len(starts) > 1 else []
    at_m0 = [e for e in after if e["batch"] == 128]
    first_kept = next((e for e in after if e["batch"] == before["batch"]), None)
    try:
        with open(os.path.join(job_dir, "result.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {}
    t_start = evs[starts[-1]].get("t_ms", 0) if len(starts) > 1 else 0
    pick = lambda e: {k: e.get(k) for k in ("batch", "progress", "noise_scale")} if e else None  # noqa: E731
    # The timeline's batch choices over both runs: each once, numbered in order (a number twice: a
    # choice written again by the resumed run, or a new one under a number already used).
    numbers = [e.get("choice") for e in evs if e.get("kind") == "batch"]
    measured = [e.get("choice") for e in evs if e.get("kind") == "batch_measured"]
    twice = lambda xs: sorted({x for x in xs if xs.count(x) > 1})  # noqa: E731
    return {"bench": "resume_state", "bin": binary, "resume_rc": rc, "resume_wall_s": round(wall, 2),
            "chosen": {"batch": chosen.get("batch"), "from": chosen.get("from")},
            "before_kill": pick(before), "first_after_resume": pick(after[0] if after else None),
            "metrics_after_resume": len(after), "metrics_at_m0_after_resume": len(at_m0),
            "seconds_to_the_kept_batch": round((first_kept["t_ms"] - t_start) / 1000, 2)
            if first_kept and t_start else None,
            "choices": [[e.get("choice"), e.get("batch"), e.get("replicas")] for e in evs if e.get("kind") == "batch"],
            "choices_before_resume": sum(1 for e in evs[:starts[-1]] if e.get("kind") == "batch")
            if len(starts) > 1 else None,
            "choice_numbers_twice": twice(numbers), "measured_numbers_twice": twice(measured),
            "test_accuracy": res.get("test_accuracy"), "resumed": res.get("resumed")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bins", nargs="+")
    ap.add_argument("--root", default="")
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--max-batch", type=int, default=1024)
    ap.add_argument("--pace", type=int, default=10000, help="[train] max_samples_per_s (a worker)")
    args = ap.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="troupe-resume-state-")
    os.makedirs(root, exist_ok=True)
    for i, b in enumerate(args.bins):
        rec = run(os.path.abspath(b), root, f"resume-{i}", args.epochs, args.max_batch, args.pace)
        print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
