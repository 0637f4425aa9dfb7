#!/usr/bin/python3
"""The export of a DeepFM job's model (issue 46): 2 PS shards, about 100,000 embedding rows.

    export_bench.py TROUPE_BIN [--rounds R]

Trains DeepFM (async_ps, 2 shards, 2 workers) on synthetic CTR data of 10 fields x 10,000 ids
(200,000 rows, 1 epoch, zipf 0.5 so that nearly every id appears), then times `troupe export` of
the finished job R times (each a new process: libtorch's load included), and reads the time the
runner's own export took from its log. One JSON line per export, then a summary.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troupe")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--root", default="/var/tmp/troupe-export-bench")
    a = p.parse_args()
    troupe = os.path.abspath(a.troupe)
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "../.."))
    job = "deepfm-%d" % int(time.time())
    subprocess.run([troupe, "run", "examples/deepfm_synthetic.toml", "--workers", "2", "--job-id", job, "--quiet",
                    "--set", 'job.root="%s"' % a.root, "--set", "ps.shards=2", "--set", "train.epochs=1",
                    "--set", "data.rows=200000", "--set", "data.test_rows=20000", "--set", "data.fields=10",
                    "--set", "data.vocab_per_field=10000", "--set", "data.zipf_exponent=0.5"],
                   check=True, capture_output=True, text=True)
    job_dir = os.path.join(a.root, job)
    log = open(os.path.join(job_dir, "logs/runner.log")).read()
    m = re.search(r"model written in ([0-9.]+) s", log)
    times = []
    for n in range(a.rounds):
        t0 = time.time()
        r = subprocess.run([troupe, "export", job_dir, "--out", "%s/export-%d" % (job_dir, n)], check=True,
                           capture_output=True, text=True)
        secs = time.time() - t0
        j = json.loads(r.stdout.strip().splitlines()[-1])
        j.update({"round": n, "process_seconds": secs, "load": os.getloadavg()[0]})
        times.append(secs)
        print(json.dumps(j), flush=True)
    print(json.dumps({"summary": True, "runner_export_seconds": float(m.group(1)) if m else None,
                      "export_process_seconds": times, "median": statistics.median(times)}))


if __name__ == "__main__":
    sys.exit(main())
