#!/usr/bin/python3
"""The Adam-preconditioned noise-scale estimate of a real job, over its run (docs/goodput.md, "Adam's
weights, bounded"): a 2-worker `batch = "auto"` ring job (Fashion-MNIST MLP 784-64-10, Adam, 2 x 32,
AdaScale) polled with `troupe status --json` every 0.5 s, for each binary given (e.g. the build before
the weights' floor and this one), `--runs` times each, alternating.

Per run, one JSON line: the estimate's |G|^2 and tr(Sigma)/M0 at the first poll that has one and at the
last, their largest / smallest over the run (how far the first rounds are from the rest), the polls whose
B_noise was infinite (|G|^2 at its floor 0; noise_scale null, noise_scale_infinite true; before
2026-12-01 reported as 0), the batch choices with the B_noise each was
made at (from the timeline), the test accuracy and the job's seconds. Then one summary line per binary.

  adam_estimate.py BIN [BIN ...] [--runs 3] [--epochs 30] [--root DIR]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import auto_batch  # noqa: E402  (job_toml, events)


def poll(bin_, job_dir):
    try:
        out = subprocess.run([bin_, "status", "--job-dir", job_dir, "--json"], capture_output=True, text=True,
                             timeout=10).stdout
        return json.loads(out).get("goodput")
    except (subprocess.SubprocessError, ValueError, OSError):
        return None


def run(bin_, root, name, epochs):
    file = os.path.join(root, name + ".toml")
    with open(file, "w") as f:
        f.write(auto_batch.job_toml(root, name, epochs, 32, True, 2, 4096))
    job_dir = os.path.join(root, "jobs", name)
    shutil.rmtree(job_dir, ignore_errors=True)
    seen = []
    with open(os.path.join(root, name + ".out"), "w") as out:
        p = subprocess.Popen([bin_, "run", file, "--job-id", name, "--quiet"], stdout=out, stderr=subprocess.STDOUT)
        while p.poll() is None:
            time.sleep(0.5)
            g = poll(bin_, job_dir)
            if g and g.get("rounds", 0) > 0 and (not seen or g["rounds"] != seen[-1]["rounds"]):
                seen.append(g)
    try:
        with open(os.path.join(job_dir, "result.json")) as f:
            res = json.load(f)
    except (OSError, ValueError):
        res = {}
    sqr = [g["grad_sqr"] for g in seen if g["grad_sqr"] > 0]
    var = [g["grad_var"] for g in seen if g["grad_var"] > 0]
    choices = [(e.get("batch"), None if e.get("noise_scale_infinite") else round(e.get("noise_scale") or 0, 1))
               for e in auto_batch.events(job_dir) if e.get("kind") == "batch"]
    return {"bench": "adam_estimate", "bin": bin_, "name": name, "polls": len(seen),
            "first": seen and {k: seen[0][k] for k in ("rounds", "grad_sqr", "grad_var", "noise_scale")},
            "last": seen and {k: seen[-1][k] for k in ("rounds", "grad_sqr", "grad_var", "noise_scale")},
            "grad_sqr_spread": sqr and max(sqr) / min(sqr), "grad_var_spread": var and max(var) / min(var),
            "polls_infinite": sum(1 for g in seen if g["grad_sqr"] <= 0),
            "choices": choices, "choices_infinite": sum(1 for c in choices if c[1] is None or c[1] == 0),
            "test_accuracy": res.get("test_accuracy"), "job_seconds": res.get("wall_seconds")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bins", nargs="+")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--root", default="")
    args = ap.parse_args()
    root = args.root or tempfile.mkdtemp(prefix="troupe-adam-estimate-")
    os.makedirs(root, exist_ok=True)
    bins = [os.path.abspath(b) for b in args.bins]
    recs = {b: [] for b in bins}
    for r in range(args.runs):
        for i, b in enumerate(bins):
            rec = run(b, root, f"b{i}-r{r}", args.epochs)
            recs[b].append(rec)
            print(json.dumps(rec), flush=True)
    for b in bins:
        rs = recs[b]
        print(json.dumps({"bench": "adam_estimate_summary", "bin": b, "runs": len(rs),
                          "choices": sum(len(r["choices"]) for r in rs),
                          "choices_at_infinite_noise_scale": sum(r["choices_infinite"] for r in rs),
                          "polls": sum(r["polls"] for r in rs),
                          "polls_infinite": sum(r["polls_infinite"] for r in rs),
                          "grad_sqr_spread": [round(r["grad_sqr_spread"] or 0, 1) for r in rs],
                          "test_accuracy": [r["test_accuracy"] for r in rs]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
