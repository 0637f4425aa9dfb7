#!/usr/bin/python3
# Recovery benchmark: a 2-worker synchronous job (allreduce MLP) where one worker is SIGKILLed.
# Measures the surviving worker's longest gap between steps after the kill (vs its median step
# time before it) and the time until a replacement trains its first step; then the same with
# torchrun (TorchElastic, gloo DDP, 2 workers, one SIGKILLed; it restarts every worker).
# Usage: recovery_bench.py TROUPE_BIN   (prints JSON lines)
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
KILL_AFTER_STEPS = 300
# The model of examples/fashion_mnist.toml (MLP 784-256-128-10, Adam, batch 64), in both systems.
HIDDEN = [256, 128]


def read_steps(path):
    try:
        with open(path) as f:
            return [int(x) for x in f.read().split()]
    except FileNotFoundError:
        return []


def wait_steps(path, n, timeout=120):
    end = time.time() + timeout
    while time.time() < end:
        if len(read_steps(path)) >= n:
            return True
        time.sleep(0.01)
    return False


def measure(survivor, replacement, kill_us):
    before = [b - a for a, b in zip(survivor, survivor[1:]) if b <= kill_us]
    around = [p for p in survivor if p <= kill_us][-1:] + [p for p in survivor if p > kill_us]
    gaps = [b - a for a, b in zip(around, around[1:])]
    median = statistics.median(before) if before else 0
    longest = max(gaps) if gaps else None
    # The machine's own jitter: the longest gap over as many steps just before the kill.
    window = before[-len(gaps):] if gaps else []
    first = next((p for p in replacement if p > kill_us), None)
    return {
        "median_step_ms": median / 1000,
        "longest_gap_ms": None if longest is None else longest / 1000,
        "gap_over_median": None if longest is None or not median else longest / median,
        "replacement_first_step_ms": None if first is None else (first - kill_us) / 1000,
        "longest_gap_before_kill_ms": max(window) / 1000 if window else None,
        "steps_after_kill": len(gaps),
    }


def troupe_run(binary, tmp):
    root = f"{tmp}/troupe"
    os.makedirs(f"{root}/steps", exist_ok=True)
    job = f"{root}/job.toml"
    with open(job, "w") as f:
        f.write(f"""[job]
root = "{root}/jobs"
dataset_cache = "{tempfile.gettempdir()}/troupe-test-datasets"
strategy = "allreduce"
name = "recovery"
workers = 2
records_per_task = 500
[model]
type = "mlp"
hidden = {HIDDEN}
[train]
epochs = 2
batch_size = 64
optimizer = "adam"
learning_rate = 0.001
[data]
source = "fashion-mnist"
max_test_rows = 2000
""")
    env = dict(os.environ, TROUPE_STEP_LOG=f"{root}/steps")
    p = subprocess.Popen([binary, "run", job, "--job-id", "recovery", "--quiet"], env=env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    victim_steps = f"{root}/steps/worker-1#0.steps"
    if not wait_steps(victim_steps, KILL_AFTER_STEPS):
        p.kill()
        return {"error": "worker-1 did not train"}
    nodes = json.load(open(f"{root}/jobs/recovery/nodes.json"))
    pid = next(n["pid"] for n in nodes["nodes"] if n["name"] == "worker-1" and n["state"] != "exited")
    kill_us = time.time_ns() // 1000
    os.kill(pid, signal.SIGKILL)
    code = p.wait(timeout=300)
    survivor = read_steps(glob.glob(f"{root}/steps/worker-0#*.steps")[0])
    repl = sorted(glob.glob(f"{root}/steps/worker-1#*.steps"))
    repl = [f for f in repl if not f.endswith("#0.steps")]
    r = measure(survivor, read_steps(repl[0]) if repl else [], kill_us)
    r["exit_code"] = code
    r["gaps_over_5ms_after_kill"] = [
        {"at_ms": round((a - kill_us) / 1000, 1), "gap_ms": round((b - a) / 1000, 1)}
        for a, b in zip(survivor, survivor[1:]) if b > kill_us and b - a > 5000][:10]
    return r


def torch_run(tmp):
    d = f"{tmp}/torch"
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, STEP_DIR=d, STEPS="1500", OMP_NUM_THREADS="1", HIDDEN=",".join(map(str, HIDDEN)))
    cmd = ["/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--max_restarts=3", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29533",
           # torch 1.13 on Python 3.11: the default "0" (Std.NONE) parses to None and crashes the agent.
           "--redirects", "1", "--tee", "1", f"--log_dir={d}/logs", f"{HERE}/ddp_mlp.py"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not wait_steps(f"{d}/rank1.steps", KILL_AFTER_STEPS, timeout=180):
        p.kill()
        return {"error": "rank 1 did not train"}
    pid = int(open(f"{d}/rank1.pid").read())
    kill_us = time.time_ns() // 1000
    os.kill(pid, signal.SIGKILL)
    code = p.wait(timeout=600)
    # rank files are appended across restarts: the survivor's gap spans its own restart.
    r = measure(read_steps(f"{d}/rank0.steps"), read_steps(f"{d}/rank1.steps"), kill_us)
    r["exit_code"] = code
    return r


def main():
    # --troupe-only: skip torchrun (while working on troupe's side); --keep DIR: keep the job
    # directory, logs and step files there.
    args = sys.argv[1:]
    troupe_only = "--troupe-only" in args
    keep = args[args.index("--keep") + 1] if "--keep" in args else None
    binary = [a for a in args if not a.startswith("--") and a != keep][0]
    if keep:
        os.makedirs(keep, exist_ok=True)
        t = troupe_run(binary, keep)
        p = {} if troupe_only else torch_run(keep)
    else:
        with tempfile.TemporaryDirectory(prefix="troupe-recovery-") as tmp:
            t = troupe_run(binary, tmp)
            p = {} if troupe_only else torch_run(tmp)
    for name, r in (("troupe", t), ("torchrun", p)):
        if not r:
            continue
        print(json.dumps({"bench": "recovery", "system": name, "workers": 2, "killed": "one worker (SIGKILL)", **r}))
    if t.get("longest_gap_ms") and p.get("longest_gap_ms"):
        print(json.dumps({"bench": "recovery", "metric": "survivor_longest_gap_ratio_torchrun_over_troupe",
                          "value": p["longest_gap_ms"] / t["longest_gap_ms"],
                          "troupe_gap_over_median": t["gap_over_median"], "target": "<= 2"}))


if __name__ == "__main__":
    main()
