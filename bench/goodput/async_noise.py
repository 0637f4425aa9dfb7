#!/usr/bin/python3
"""async_ps's gradient noise scale from the pushes the PS shards receive (issue #48, docs/goodput.md
"async_ps"), in real jobs of the Fashion-MNIST MLP (784-64-10, 2 workers, 3 PS shards):

  cost     the job's samples/s with [train] noise_scale on and off (Adam, unpaced, 5 epochs),
           `--runs` runs of each, alternating (on first in even runs, off first in odd ones); one
           JSON line per run, then the medians
  compare  the shards' estimate against the synchronous ring's unbiased one on the same job (SGD,
           workers paced to 1,500 samples/s, noise_scale_every = 1): `troupe status --json` every 3 s
           of an async_ps job, then of the same job under allreduce; one JSON line per read

  async_noise.py TROUPE_BIN cost [--runs 4] [--root DIR]
  async_noise.py TROUPE_BIN compare [--root DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time


def job_toml(root, name, strategy, extra, optimizer, epochs, train_rows):
    lr = "0.002" if optimizer == "adam" else "0.05"
    return f"""[job]
root = "{root}/jobs"
dataset_cache = "{root}/datasets"
strategy = "{strategy}"
name = "{name}"
workers = 2
records_per_task = 500
[ps]
shards = 3
[model]
type = "mlp"
hidden = [64]
[train]
epochs = {epochs}
batch_size = 64
optimizer = "{optimizer}"
learning_rate = {lr}
{extra}[data]
source = "fashion-mnist"
max_train_rows = {train_rows}
max_test_rows = 1000
"""


def write(root, name, text):
    path = os.path.join(root, name + ".toml")
    with open(path, "w") as f:
        f.write(text)
    return path


def cost(args):
    rates = {"true": [], "false": []}
    for i in range(args.runs):
        for on in (("true", "false") if i % 2 == 0 else ("false", "true")):  # ABBA: neither always first
            name = f"cost-{on}-{i}"
            path = write(args.root, name, job_toml(args.root, name, "async_ps", f"noise_scale = {on}\n", "adam", 5,
                                                   60000))
            out = subprocess.run([args.bin, "run", path, "--job-id", name, "--quiet"], capture_output=True,
                                 text=True).stdout.strip().splitlines()
            res = json.loads(out[-1]) if out else {}
            rate = res.get("samples_trained", 0) / max(res.get("master_seconds", 0) or 1e-9, 1e-9)
            rates[on].append(rate)
            print(json.dumps({"run": i, "noise_scale": on == "true", "samples": res.get("samples_trained"),
                              "master_seconds": res.get("master_seconds"), "samples_per_s": round(rate)}),
                  flush=True)
    on, off = statistics.median(rates["true"]), statistics.median(rates["false"])
    print(json.dumps({"summary": "cost", "median_on": round(on), "median_off": round(off),
                      "ratio": round(on / off, 4)}))


def compare(args):
    for strategy in ("async_ps", "allreduce"):
        name = f"compare-{strategy}"
        extra = "max_samples_per_s = 1500\nnoise_scale_every = 1\n"
        path = write(args.root, name, job_toml(args.root, name, strategy, extra, "sgd", 1, 60000))
        job = subprocess.Popen([args.bin, "run", path, "--job-id", name, "--quiet"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        while job.poll() is None:
            time.sleep(3)
            st = subprocess.run([args.bin, "status", "--json", "--job-dir", os.path.join(args.root, "jobs", name)],
                                capture_output=True, text=True)
            try:
                j = json.loads(st.stdout)
            except ValueError:
                continue
            g = j.get("goodput") or {}
            if g:
                print(json.dumps({"strategy": strategy, "samples": j.get("samples_total"),
                                  "noise_scale": round(g.get("noise_scale") or 0, 1),
                                  "noise_scale_infinite": g.get("noise_scale_infinite", False), "grad_sqr": g.get("grad_sqr"),
                                  "grad_var": g.get("grad_var"), "rounds": g.get("rounds"),
                                  "push_shards": g.get("push_shards")}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin")
    ap.add_argument("mode", choices=("cost", "compare"))
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("--root", default="")
    args = ap.parse_args()
    args.bin = os.path.abspath(args.bin)
    args.root = os.path.abspath(args.root or tempfile.mkdtemp(prefix="troupe-async-noise-"))
    os.makedirs(args.root, exist_ok=True)
    cost(args) if args.mode == "cost" else compare(args)


if __name__ == "__main__":
    main()
