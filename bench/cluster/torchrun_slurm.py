# The torchrun peer of slurm_bench.py's preemption (`slurm_bench.py TROUPE_BIN --torchrun`): the same
# Slurm test cluster, one Slurm job per host, each a TorchElastic agent
#   torchrun --nnodes=2:4 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint=h1:29533 --max_restarts=3
# running bench/recovery/ddp_mlp.py (gloo DDP, one rank per host). The agent on h1 hosts the c10d
# store and runs in the high partition (never preempted, as troupe's master); those on h2..h4 in the
# preemptible one. Once all four train, a high-priority job takes the host of one of them whole, as
# for troupe's victim: that agent gets Slurm's SIGTERM, the others' allreduce fails, and their agents
# restart every rank in a new rendezvous of the three nodes left (torchrun's defaults: the rendezvous
# closes `last_call_timeout`, 30 s, after min nodes joined, unless max nodes do). Reported: from the
# high job's submission to the first step after the restart (time until training resumes), and the
# survivors' longest step gap.
import glob
import json
import os
import statistics
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DDP = os.path.join(HERE, "..", "recovery", "ddp_mlp.py")


def sh(*a):
    return subprocess.run(a, capture_output=True, text=True).stdout.strip()


def all_steps(d):
    out = []
    for f in glob.glob(f"{d}/rank*.steps"):
        out += [int(x) / 1000 for x in open(f).read().split()]  # ms
    return sorted(out)


def wait(pred, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    return None


def trained_after_gap(d, t1):
    # Training stopped after t1 (a gap over 1 s) and has made 50 steps since.
    s = [x for x in all_steps(d) if x > t1]
    gaps = [i for i, (a, b) in enumerate(zip(s, s[1:])) if b - a > 1000]
    return bool(gaps) and len(s) - gaps[-1] > 50


def agent(host, partition, d):
    cmd = (f"exec env STEP_DIR={d} STEPS=1000000 OMP_NUM_THREADS=1 HIDDEN=256,128 /usr/bin/python3 -m "
           f"torch.distributed.run --nnodes=2:4 --nproc_per_node=1 --max_restarts=3 --rdzv_backend=c10d "
           f"--rdzv_endpoint=h1:29533 --rdzv_id=bench --redirects 1 --tee 1 --log_dir={d}/logs-{host} {DDP}")
    return sh("sbatch", "--parsable", "--no-requeue", "-p", partition, "-w", host, "-N1", "-n1", "-c2",
              "--signal=B:TERM@30", "-J", f"troupe-bench-torch:{host}", "-o", f"{d}/agent-{host}.log",
              "--wrap", cmd)


def torchrun_preemption(w):
    d = f"{w}/torch"
    os.makedirs(d, exist_ok=True)
    jobs = [agent("h1", "high", d)] + [agent(h, "low", d) for h in ("h2", "h3", "h4")]
    try:
        if not wait(lambda: len(glob.glob(f"{d}/rank*.steps")) == 4 and len(all_steps(d)) > 400, 300):
            return {"bench": "slurm_preemption_torchrun", "error": "the 4 ranks did not train",
                    "queue": sh("squeue", "-h", "-o", "%i %j %T %N")}
        victim = "h3"
        t1 = time.time() * 1000
        high = sh("sbatch", "--parsable", "-p", "high", "-w", victim, "--exclusive", "-J", "troupe-bench-high",
                  "--wrap", "sleep 5")
        resumed = wait(lambda: trained_after_gap(d, t1), 240)
        s = all_steps(d)
        before = [b - a for a, b in zip(s, s[1:]) if b < t1]
        after = [(b - a, b) for a, b in zip(s, s[1:]) if b > t1]
        gap, first = max(after) if after else (None, None)
        return {"bench": "slurm_preemption_torchrun", "victim_host": victim, "high_job": high,
                "resumed": bool(resumed),
                "submit_to_training_resumed_ms": first and round(first - t1, 1),
                "survivors_longest_gap_ms": gap and round(gap, 1),
                "median_step_ms": before and round(statistics.median(before), 2)}
    finally:
        for j in jobs:
            sh("scancel", j)
