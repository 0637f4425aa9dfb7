#!/usr/bin/python3
# Slurm benchmarks on the test cluster (scripts/slurm-cluster.sh up; root): one DeepFM async-PS job
# with launcher = "slurm" (master and 2 shards on h1, workers of 4 CPUs, so one per host), JSON lines:
# 1. a pending worker that Slurm starts: h4 is held by a high-priority blocker, so worker-2 waits
#    PENDING; the blocker is cancelled and we time scancel -> the node process up (its first log
#    line "up at") -> its first trained step (TROUPE_STEP_LOG); target < 1 s from Slurm's start.
# 2. a preemption: a high-priority job takes h3 whole; the victim's SIGTERM (its "stopping" log line)
#    -> the master's new view without it (ring rebuilt) -> its tasks back in TODO; target < 100 ms;
#    and the survivors' longest step gap around it against their median step.
# 3. --torchrun: then the same preemption against torchrun on the same cluster (torchrun_slurm.py;
#    python3-torch from scripts/install-deps.sh --bench): time until training resumes.
# Usage: slurm_bench.py TROUPE_BIN [--keep DIR] [--torchrun]
import glob
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchrun_slurm  # noqa: E402
from torchrun_slurm import sh, wait  # noqa: E402

JOB = """[job]
root = "{w}/jobs"
dataset_cache = "/var/tmp/troupe-slurm-datasets"
strategy = "async_ps"
name = "bench"
workers = 3
records_per_task = 1024
[ps]
shards = 2
checkpoint_every_ms = 500
[model]
type = "deepfm"
embedding_dim = 8
hidden = [32]
[train]
epochs = 20
batch_size = 128
optimizer = "adam"
learning_rate = 0.01
[data]
source = "synthetic-ctr"
rows = 300000
test_rows = 10000
fields = 6
vocab_per_field = 50
[cluster]
launcher = "slurm"
control_partition = "high"
worker_partition = "low"
control_host = "h1"
worker_cpus = 4
"""


def log_ms(path, needle):
    try:
        for line in open(path, errors="replace"):
            if needle in line and line[:2] == "20":
                return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp() * 1000
    except OSError:
        pass
    return None


def steps(path):
    try:
        return [int(x) / 1000 for x in open(path).read().split()]  # ms
    except OSError:
        return []


def gaps_around(files, t_ms, window_ms=3000):
    out = []
    for f in files:
        s = steps(f)
        before = [b - a for a, b in zip(s, s[1:]) if b < t_ms]
        around = [b - a for a, b in zip(s, s[1:]) if t_ms - 100 <= b <= t_ms + window_ms]
        if before and around:
            out.append({"node": os.path.basename(f), "median_step_ms": round(statistics.median(before), 2),
                        "longest_gap_ms": round(max(around), 2)})
    return out


def main():
    binary = os.path.realpath(sys.argv[1])
    keep = sys.argv[sys.argv.index("--keep") + 1] if "--keep" in sys.argv else None
    w = keep or f"/var/tmp/troupe-slurm-bench-{os.getpid()}"
    os.makedirs(f"{w}/steps", exist_ok=True)
    open(f"{w}/job.toml", "w").write(JOB.format(w=w))
    blocker = sh("sbatch", "--parsable", "-p", "high", "-w", "h4", "--exclusive", "-J", "troupe-bench-blocker",
                 "--wrap", "sleep 600")
    env = dict(os.environ, TROUPE_STEP_LOG=f"{w}/steps")
    runner = subprocess.Popen([binary, "run", f"{w}/job.toml", "--job-id", "bench", "--quiet"], env=env,
                              stdout=open(f"{w}/run.out", "w"), stderr=open(f"{w}/run.err", "w"))
    logs = f"{w}/jobs/bench/logs"
    try:
        ok = wait(lambda: len(steps(f"{w}/steps/worker-0#0.steps")) > 50 and len(steps(f"{w}/steps/worker-1#0.steps")) > 50)
        if not ok:
            print(json.dumps({"bench": "slurm", "error": "workers 0 and 1 did not train"}))
            return
        t0 = time.time() * 1000
        sh("scancel", blocker)
        wait(lambda: steps(f"{w}/steps/worker-2#0.steps"))
        up = log_ms(f"{logs}/worker-2.log", "(worker) up at")
        first = (steps(f"{w}/steps/worker-2#0.steps") or [None])[0]
        print(json.dumps({"bench": "slurm_pending_worker_start", "scancel_to_node_up_ms": up and round(up - t0, 1),
                          "node_up_to_first_step_ms": up and first and round(first - up, 1),
                          "scancel_to_first_step_ms": first and round(first - t0, 1), "target_ms": 1000}))
        wait(lambda: len(steps(f"{w}/steps/worker-2#0.steps")) > 50)
        victim_host = sh("squeue", "-h", "-n", "troupe-bench:worker-1", "-o", "%N")
        t1 = time.time() * 1000
        high = sh("sbatch", "--parsable", "-p", "high", "-w", victim_host, "--exclusive", "-J", "troupe-bench-high",
                  "--wrap", "sleep 5")
        left = wait(lambda: log_ms(f"{logs}/master.log", "worker-1#0 down: left on SIGTERM"), 90)
        term = log_ms(f"{logs}/worker-1.log", "worker-1#0: stopping")
        requeued = wait(lambda: log_ms(f"{logs}/master.log", "of worker-1#0 back to TODO"), 5)
        print(json.dumps({"bench": "slurm_preemption", "victim_host": victim_host,
                          "submit_to_victim_sigterm_ms": term and round(term - t1, 1),
                          "sigterm_to_ring_rebuilt_ms": term and left and round(left - term, 1),
                          "sigterm_to_tasks_requeued_ms": term and requeued and round(requeued - term, 1),
                          "target_ms": 100,
                          "survivors": gaps_around([f"{w}/steps/worker-0#0.steps", f"{w}/steps/worker-2#0.steps"],
                                                   term or t1)}))
        back = wait(lambda: glob.glob(f"{w}/steps/worker-1#1.steps") and steps(f"{w}/steps/worker-1#1.steps"), 120)
        print(json.dumps({"bench": "slurm_grow_back", "victim_next_incarnation_trained": bool(back),
                          "high_job": high}))
        if "--torchrun" in sys.argv:
            runner.terminate()
            runner.wait(timeout=60)
            print(json.dumps(torchrun_slurm.torchrun_preemption(w)))
    finally:
        runner.terminate()
        runner.wait(timeout=60)
        sh("scancel", blocker)
        for line in sh("squeue", "-h", "-o", "%i %j").splitlines():
            if line.split()[1].startswith("troupe-bench"):
                sh("scancel", line.split()[0])


if __name__ == "__main__":
    main()
