"""bench/torchscript/run.sh's driver: the scripted MLP under `troupe train --local` (TorchScript
backend) against the same MLP in an eager PyTorch loop (eager_mlp.py) and troupe's native MLP,
interleaved run by run. Both sides get the same treatment: one thread (OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS, MKL_NUM_THREADS = 1, and [train] threads = 1), the same core (taskset), the
same epochs, each epoch timed with its evaluation; the figure compared is samples/s over the epochs
after the first (the first carries first-iteration costs: libtorch's graph executor, page faults,
Python's imports). The order of the systems rotates from run to run. Before each run the driver
can wait for the machine's 1-minute load to drop (--max-load). Prints one JSON line per system and
run, then a summary: per-run ratios TorchScript/eager, their median and min, each system's median
and min samples/s, and the load seen."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
JOB = """[model]
{model}
[train]
epochs = {epochs}
batch_size = 64
optimizer = "adam"
learning_rate = 0.001
threads = 1
log_every = 0
[data]
source = "fashion-mnist"
dir = "{data}"
"""


def load1():
    return os.getloadavg()[0]


def wait_for_load(limit, patience):
    waited = 0.0
    while limit and load1() > limit and waited < patience:
        time.sleep(10)
        waited += 10
    return waited


def pinned(cmd, cpu):
    return (["taskset", "-c", cpu] if cpu else []) + cmd


def troupe(build, job, cpu):
    out = subprocess.run(pinned([os.path.join(build, "troupe"), "train", "--local", job], cpu), env=ENV,
                         capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    secs = [h["seconds"] for h in r["history"]]
    rows = r["samples_trained"] / r["epochs"]
    warm = (len(secs) - 1) * rows / (secs[-1] - secs[0]) if len(secs) > 1 else r["samples_per_s"]
    return {"samples_per_s": r["samples_per_s"], "warm_samples_per_s": warm, "test_accuracy": r["test_accuracy"]}


def eager(epochs, data, cpu):
    out = subprocess.run(pinned([sys.executable, os.path.join(HERE, "eager_mlp.py"), "--epochs", str(epochs),
                                 "--dir", data], cpu), env=ENV, capture_output=True, text=True, check=True).stdout
    r = json.loads(out.strip().splitlines()[-1])
    r.setdefault("warm_samples_per_s", r["samples_per_s"])
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--cpu", default=str(os.cpu_count() - 1), help="core for every system ('' not to pin)")
    ap.add_argument("--max-load", type=float, default=0.0, help="wait before each run until load1 is below")
    ap.add_argument("--patience", type=float, default=600, help="seconds to wait for --max-load at most")
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="troupe-torchscript-bench.")
    pt = os.path.join(work, "mlp.pt")
    subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch", "mlp.py"), pt], check=True,
                   stdout=subprocess.DEVNULL)
    jobs = {"torch": 'type = "torchscript"\npath = "%s"' % pt, "native": 'type = "mlp"\nhidden = [256, 128]'}
    for sys_, model in jobs.items():
        with open(os.path.join(work, sys_ + ".toml"), "w") as f:
            f.write(JOB.format(model=model, epochs=a.epochs, data=a.data))
    names = {"torch": "troupe train --local (torchscript)", "native": "troupe train --local (native)",
             "eager": "eager PyTorch"}
    order = ["torch", "eager", "native"]
    res = {k: [] for k in order}
    loads = []
    for run in range(1, a.runs + 1):
        waited = wait_for_load(a.max_load, a.patience)
        before = load1()
        for sys_ in order:
            r = eager(a.epochs, a.data, a.cpu) if sys_ == "eager" else troupe(a.build, os.path.join(work, sys_ + ".toml"), a.cpu)
            res[sys_].append(r)
            print(json.dumps({"system": names[sys_], "run": run, "samples_per_s": round(r["samples_per_s"]),
                              "warm_samples_per_s": round(r["warm_samples_per_s"]),
                              "test_accuracy": round(r["test_accuracy"], 4)}), flush=True)
        loads.append([round(before, 2), round(load1(), 2), round(waited)])
        order = order[1:] + order[:1]
    ratios = [t["warm_samples_per_s"] / e["warm_samples_per_s"] for t, e in zip(res["torch"], res["eager"])]
    summary = {"summary": "torchscript / eager, warm samples/s", "ratios": [round(x, 3) for x in ratios],
               "median": round(statistics.median(ratios), 3), "min": round(min(ratios), 3),
               "runs": a.runs, "epochs": a.epochs, "cpu": a.cpu, "load1_before_after_waited": loads}
    for sys_ in res:
        w = [r["warm_samples_per_s"] for r in res[sys_]]
        summary[sys_] = {"median": round(statistics.median(w)), "min": round(min(w)), "max": round(max(w))}
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
