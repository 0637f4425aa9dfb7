"""bench/job driver (see run.sh): end-to-end DeepFM on a Frappe-shaped synthetic dataset (troupe
2 PS + 4 workers vs PyTorch in one process), time from `troupe run` to the first trained minibatch,
and ElasticDL's convergence experiment (workers varied 2<->4 vs a fixed 4) with the time from
`troupe scale` up to a new worker's first task. Prints JSON lines."""
import argparse
import glob
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))

# The native DeepFM, or (--model torchscript) the same shape written in PyTorch: examples/torch/deepfm.py
# for 10 fields, no dense features, embedding_dim 8 (its deep part is 64 -> 32 too).
NATIVE_MODEL = 'type = "deepfm"\nembedding_dim = 8\nhidden = [64, 32]'
TORCH_MODEL = 'type = "torchscript"\npath = "{path}"\nembedding_dim = 8'

JOB = """[job]
name = "{name}"
root = "{root}"
dataset_cache = "{cache}"
strategy = "async_ps"
workers = 4
min_workers = 1
max_workers = 8
records_per_task = 4096

[ps]
shards = 2
checkpoint_every_ms = 2000

[model]
{model}

[train]
epochs = {epochs}
batch_size = 256
optimizer = "adam"
learning_rate = 0.005
seed = 1

[data]
source = "synthetic-ctr"
rows = 288609
test_rows = 28861
fields = 10
vocab_per_field = 538
zipf_exponent = 1.05
factor_dim = 4
"""


def emit(d):
    print(json.dumps(d), flush=True)


def wall_ms():
    return int(time.time() * 1000)


class Bench:
    def __init__(self, a):
        self.a = a
        self.work = os.path.abspath(a.work)
        self.troupe = os.path.join(ROOT, a.build, "troupe")
        self.exporter = os.path.join(ROOT, a.build, "bench", "job", "export_records")
        self.cache = os.path.join(self.work, "datasets")

    def job_file(self, name, epochs):
        root = os.path.join(self.work, "jobs_" + name)
        shutil.rmtree(root, ignore_errors=True)
        path = os.path.join(self.work, name + ".toml")
        with open(path, "w") as f:
            f.write(JOB.format(name=name, root=root, cache=self.cache, epochs=epochs, model=self.model()))
        return path, root

    def model(self):
        if self.a.model == "native":
            return NATIVE_MODEL
        path = os.path.join(self.work, "deepfm.pt")
        if not os.path.exists(path):
            subprocess.run([sys.executable, os.path.join(ROOT, "examples", "torch", "deepfm.py"), "10", "0", "8",
                            path], check=True, stdout=subprocess.DEVNULL)
        return TORCH_MODEL.format(path=path)

    def start(self, name, epochs):
        path, root = self.job_file(name, epochs)
        log = open(os.path.join(self.work, name + ".runner.log"), "w")
        t0 = wall_ms()
        p = subprocess.Popen([self.troupe, "run", path], stdout=subprocess.PIPE, stderr=log, text=True)
        return p, root, t0

    def finish(self, p, t0, timeout=900):
        out, _ = p.communicate(timeout=timeout)
        t1 = wall_ms()
        if p.returncode != 0:
            sys.exit("troupe run failed (rc %d); see %s" % (p.returncode, self.work))
        res = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
        res["external_wall_seconds"] = (t1 - t0) / 1000.0
        res["external_first_step_seconds"] = (res.get("first_step_wall_ms", t0) - t0) / 1000.0
        return res

    def run(self, name, epochs):
        p, root, t0 = self.start(name, epochs)
        return self.finish(p, t0), root

    def first_step(self):
        res, _ = self.run("firststep_cold", 1)
        emit({"bench": "job_first_step", "cache": "cold (dataset imported in this run)",
              "first_step_seconds": res.get("first_step_seconds"),
              "external_first_step_seconds": res["external_first_step_seconds"]})
        runs = [self.run("firststep_%d" % i, 1)[0] for i in range(self.a.first_step_runs)]
        fs = [r["first_step_seconds"] for r in runs]
        ext = [r["external_first_step_seconds"] for r in runs]
        emit({"bench": "job_first_step", "cache": "warm (dataset already in the cache)", "runs": len(fs),
              "first_step_seconds_median": statistics.median(fs), "first_step_seconds": fs,
              "external_first_step_seconds_median": statistics.median(ext), "target_seconds": 1.0})

    def e2e(self):
        res, root = self.run("e2e_fixed4", self.a.epochs)
        emit({"bench": "job_e2e", "system": "troupe", "model": self.a.model, "setup": "DeepFM async_ps 2 PS + 4 workers",
              "epochs": self.a.epochs, "wall_seconds": res["wall_seconds"],
              "external_wall_seconds": res["external_wall_seconds"],
              "samples_trained": res["samples_trained"],
              "samples_per_sec": res["samples_trained"] / res["wall_seconds"], "test_auc": res["test_auc"],
              "true_auc": res.get("true_auc"), "elasticdl_reported_seconds": 106})
        return res

    def torch_peer(self):
        keys = [d for d in glob.glob(os.path.join(self.cache, "*")) if os.path.isdir(os.path.join(d, "train"))]
        key = [k for k in keys if "538" in os.path.basename(k)] or keys
        src = key[0]
        out = os.path.join(self.work, "export")
        for part in ("train", "test"):
            subprocess.run([self.exporter, os.path.join(src, part), out + "." + part], check=True,
                           stdout=subprocess.DEVNULL)
        r = subprocess.run([sys.executable, os.path.join(HERE, "torch_deepfm.py"), out + ".train",
                            out + ".test", "--epochs", str(self.a.epochs), "--threads", str(self.a.threads)],
                           check=True, capture_output=True, text=True)
        line = json.loads(r.stdout.strip().splitlines()[-1])
        emit(line)
        return line

    def elastic(self, fixed):
        p, root, t0 = self.start("elastic_2to4", self.a.epochs)
        ups, events, target = [], [], 4
        time.sleep(self.a.scale_every)
        while p.poll() is None:
            target = 2 if target == 4 else 4
            t = wall_ms()
            r = subprocess.run([self.troupe, "scale", "--root", root, "--workers", str(target)],
                               capture_output=True, text=True)
            if r.returncode != 0:
                break  # the job is over
            events.append((t, target))
            time.sleep(self.a.scale_every)
        res = self.finish(p, t0)
        # Each worker process logs its first lease once; a line after a scale-up (and before the
        # next scale event) is a worker that scale-up started.
        leases = []
        for f in glob.glob(os.path.join(root, "*", "logs", "worker*")):
            for m in re.finditer(r"first task \d+ leased at wall_ms (\d+)", open(f, errors="replace").read()):
                leases.append(int(m.group(1)))
        delays = []
        for i, (t, n) in enumerate(events):
            if n != 4:
                continue
            end = events[i + 1][0] if i + 1 < len(events) else 1 << 62
            delays += [(x - t) / 1000.0 for x in leases if t < x < end]
        emit({"bench": "job_elastic_convergence", "epochs": self.a.epochs, "scale_every_s": self.a.scale_every,
              "scale_events": len(events), "fixed4_test_auc": fixed["test_auc"],
              "elastic_test_auc": res["test_auc"], "auc_gap": abs(fixed["test_auc"] - res["test_auc"]),
              "target_gap": 0.005, "elastic_wall_seconds": res["wall_seconds"],
              "tasks_requeued": res.get("tasks_requeued")})
        emit({"bench": "job_scale_up_first_task", "new_workers_measured": len(delays),
              "seconds_median": statistics.median(delays) if delays else None,
              "seconds": sorted(delays), "target_seconds": 1.0})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--work", default="/tmp/troupe_job_bench")
    ap.add_argument("--build", default="build/release")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--first-step-runs", type=int, default=5)
    ap.add_argument("--scale-every", type=float, default=1.0)
    ap.add_argument("--only", default="first_step,e2e,torch,elastic")
    ap.add_argument("--model", choices=["native", "torchscript"], default="native",
                    help="troupe's DeepFM, or the same model scripted in PyTorch (examples/torch/deepfm.py)")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    b = Bench(a)
    only = a.only.split(",")
    if "first_step" in only:
        b.first_step()
    fixed = b.e2e() if ("e2e" in only or "elastic" in only) else None
    if "torch" in only:
        b.torch_peer()
    if "elastic" in only:
        b.elastic(fixed)


if __name__ == "__main__":
    main()
