#!/usr/bin/python3
"""The cost of ring checkpoints on training (issue 46: <= 2% slower).

    checkpoint_bench.py TROUPE_BIN [--rounds R] [--every MS...]

An allreduce job of examples/fashion_mnist.toml's data (2 workers, MLP 784-1024-1024-10, Adam: a
replica of 1.9M parameters, about 23 MB with the optimizer's slots), 2 epochs, run alternately with
[job] checkpoint_every_ms = 0 (off), 10000 (the default) and 1000; samples/s = samples trained over
the time from the first step to the end (result.json). Prints one JSON line per run and a summary
with each setting's median against "off".
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(troupe, every, root, n):
    job = "ckpt-%d-%d" % (every, n)
    r = subprocess.run([troupe, "run", "examples/fashion_mnist.toml", "--workers", "2", "--job-id", job, "--quiet",
                        "--set", "model.hidden=[1024, 1024]", "--set", "train.epochs=2",
                        "--set", "job.checkpoint_every_ms=%d" % every, "--set", 'job.root="%s"' % root],
                       check=True, capture_output=True, text=True)
    res = json.loads(r.stdout.strip().splitlines()[-1])
    secs = res["wall_seconds"] - res["first_step_seconds"]
    versions = 0
    state = os.path.join(root, job, "checkpoints/ring/state.json")
    if os.path.exists(state):
        versions = json.load(open(state))["version"]
    return {"every_ms": every, "round": n, "samples": res["samples_trained"], "seconds": secs,
            "samples_per_s": res["samples_trained"] / secs, "checkpoints": versions,
            "accuracy": res.get("test_accuracy"), "load": os.getloadavg()[0]}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troupe")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--every", type=int, nargs="*", default=[0, 10000, 1000])
    p.add_argument("--root", default="/var/tmp/troupe-checkpoint-bench")
    a = p.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    rates = {e: [] for e in a.every}
    for n in range(a.rounds):
        for e in a.every:
            r = run(os.path.abspath(a.troupe), e, a.root, n)
            rates[e].append(r["samples_per_s"])
            print(json.dumps(r), flush=True)
    off = statistics.median(rates[a.every[0]])
    print(json.dumps({"summary": True, "samples_per_s": {str(e): v for e, v in rates.items()},
                      "vs_off": {str(e): statistics.median(v) / off for e, v in rates.items()}}))


if __name__ == "__main__":
    sys.exit(main())
