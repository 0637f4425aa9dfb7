#!/usr/bin/python3
# Recovery benchmark: a 2-worker synchronous job (allreduce MLP) where one worker is SIGKILLed.
# Measures the surviving worker's longest gap between steps after the kill (vs its median step
# time before it) and the time until a replacement trains its first step; then the same with
# torchrun (TorchElastic, gloo DDP, 2 workers, one SIGKILLed; it restarts every worker).
# Usage: recovery_bench.py TROUPE_BIN [--pin] [--troupe-only] [--sigterm] [--torchscript] [--keep DIR]
# (JSON lines). --torchscript: troupe trains the same MLP as a scripted PyTorch module
# (examples/torch/mlp.py) through the TorchScript backend, whose replacement loads libtorch.
# --sigterm: the worker gets SIGTERM instead (a preemption's notice): it leaves on its own word, and
# the bench also reports, from the job's logs, the time from the signal to the master's view without
# it (the ring rebuilt) and to its tasks back in TODO.
# --pin: the survivor gets core 0 to itself, everything else (the other worker, its replacement,
# master, runner, this script; torchrun's agent and restarted ranks) shares the other cores (core 1
# of a 2-core machine), as on a
# cluster where each worker has its machine. Without it, all share both cores and the machine's
# scheduling jitter alone exceeds 2x the median step (see longest_gap_before_kill_ms).
import glob
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime

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


def children(pid):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    return out


def pin(pid, cpus, tree=False):
    # Every thread of the process (threads it starts later inherit it), and with `tree` its
    # descendants too.
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            os.sched_setaffinity(int(tid), cpus)
    except OSError:
        pass
    if tree:
        for c in children(pid):
            pin(c, cpus, True)


def pin_layout(root_pid, survivor_pid):
    # Everything on the other cores (core 1 of a 2-core machine), then the survivor alone on core 0.
    rest = set(range(1, os.cpu_count()))
    os.sched_setaffinity(0, rest)
    pin(root_pid, rest, True)
    pin(survivor_pid, {0})
    return time.time_ns() // 1000


def measure(survivor, replacement, kill_us, since_us=0):
    before = [b - a for a, b in zip(survivor, survivor[1:]) if b <= kill_us and a >= since_us]
    around = [p for p in survivor if p <= kill_us][-1:] + [p for p in survivor if p > kill_us]
    gaps = [b - a for a, b in zip(around, around[1:])]
    median = statistics.median(before) if before else 0
    longest = max(gaps) if gaps else None
    # The machine's own jitter: the longest gap over as many steps just before the kill.
    window = before[-len(gaps):] if gaps else []
    first = next((p for p in replacement if p > kill_us), None)
    # The recovery itself: from the kill until the survivor has trained 20 steps with the
    # replacement (its longest gap there; the rest of the run after it is ordinary training).
    after = [p for p in around if first is not None and p > first]
    end = after[min(19, len(after) - 1)] if after else None
    rec = [b - a for a, b in zip(around, around[1:]) if end is not None and b <= end]
    rec_before = before[-len(rec):] if rec else []
    return {
        "recovery_longest_gap_ms": max(rec) / 1000 if rec else None,
        "recovery_steps": len(rec),
        # The same number of steps just before the kill, no fault: the machine's jitter.
        "longest_gap_before_kill_recovery_window_ms": max(rec_before) / 1000 if rec_before else None,
        "median_step_ms": median / 1000,
        "longest_gap_ms": None if longest is None else longest / 1000,
        "gap_over_median": None if longest is None or not median else longest / median,
        "replacement_first_step_ms": None if first is None else (first - kill_us) / 1000,
        "longest_gap_before_kill_ms": max(window) / 1000 if window else None,
        "steps_after_kill": len(gaps),
    }


def log_ms(path, needle):
    # Wall time (Unix ms) of the first log line containing `needle` (spdlog: local time, ms).
    try:
        for line in open(path):
            if needle in line:
                return datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").timestamp() * 1000
    except OSError:
        pass
    return None


def leave_times(job_dir, kill_us):
    # SIGTERM -> the master's new view without the victim (its ring rebuilt) and -> its tasks re-queued.
    master = f"{job_dir}/logs/master.log"
    out = {}
    for key, needle in (("sigterm_to_ring_rebuilt_ms", "worker-1#0 down: left on SIGTERM"),
                        ("sigterm_to_tasks_requeued_ms", "of worker-1#0 back to TODO")):
        t = log_ms(master, needle)
        out[key] = None if t is None else round(t - kill_us / 1000, 1)
    for line in open(f"{job_dir}/logs/worker-1.log", errors="replace"):
        if "left the job (" in line:
            out["victim_leave_answered_us"] = int(line.split("left the job (")[1].split()[0])
    return out


def troupe_run(binary, tmp, pinned, sig, torchscript=False):
    root = f"{tmp}/troupe"
    os.makedirs(f"{root}/steps", exist_ok=True)
    job = f"{root}/job.toml"
    model = f'type = "mlp"\nhidden = {HIDDEN}'
    if torchscript:
        subprocess.run([sys.executable, f"{HERE}/../../examples/torch/mlp.py", f"{root}/mlp.pt"],
                       check=True, stdout=subprocess.DEVNULL)
        model = f'type = "torchscript"\npath = "{root}/mlp.pt"'
    with open(job, "w") as f:
        f.write(f"""[job]
root = "{root}/jobs"
dataset_cache = "{tempfile.gettempdir()}/troupe-test-datasets"
strategy = "allreduce"
name = "recovery"
workers = 2
records_per_task = 500
[model]
{model}
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
    since_us, start = 0, 0
    if pinned:
        if not wait_steps(victim_steps, 1):
            p.kill()
            return {"error": "worker-1 did not train"}
        nodes = json.load(open(f"{root}/jobs/recovery/nodes.json"))
        survivor_pid = next(n["pid"] for n in nodes["nodes"] if n["name"] == "worker-0" and n["state"] != "exited")
        since_us = pin_layout(p.pid, survivor_pid)
        start = len(read_steps(victim_steps))
    if not wait_steps(victim_steps, start + KILL_AFTER_STEPS):
        p.kill()
        return {"error": "worker-1 did not train"}
    nodes = json.load(open(f"{root}/jobs/recovery/nodes.json"))
    pid = next(n["pid"] for n in nodes["nodes"] if n["name"] == "worker-1" and n["state"] != "exited")
    kill_us = time.time_ns() // 1000
    os.kill(pid, sig)
    code = p.wait(timeout=300)
    survivor = read_steps(glob.glob(f"{root}/steps/worker-0#*.steps")[0])
    repl = sorted(glob.glob(f"{root}/steps/worker-1#*.steps"))
    repl = [f for f in repl if not f.endswith("#0.steps")]
    r = measure(survivor, read_steps(repl[0]) if repl else [], kill_us, since_us)
    r["exit_code"] = code
    r["pinned"] = pinned
    if sig == signal.SIGTERM:
        r.update(leave_times(f"{root}/jobs/recovery", kill_us))
    r["gaps_over_5ms_after_kill"] = [
        {"at_ms": round((a - kill_us) / 1000, 1), "gap_ms": round((b - a) / 1000, 1)}
        for a, b in zip(survivor, survivor[1:]) if b > kill_us and b - a > 5000][:10]
    return r


def torch_run(tmp, pinned):
    d = f"{tmp}/torch"
    os.makedirs(d, exist_ok=True)
    env = dict(os.environ, STEP_DIR=d, STEPS="1500", OMP_NUM_THREADS="1", HIDDEN=",".join(map(str, HIDDEN)))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
           "--max_restarts=3", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29533",
           # torch 1.13 on Python 3.11: the default "0" (Std.NONE) parses to None and crashes the agent.
           "--redirects", "1", "--tee", "1", f"--log_dir={d}/logs", f"{HERE}/ddp_mlp.py"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    since_us, start = 0, 0
    if pinned:
        if not wait_steps(f"{d}/rank1.steps", 1, timeout=180):
            p.kill()
            return {"error": "rank 1 did not train"}
        since_us = pin_layout(p.pid, int(open(f"{d}/rank0.pid").read()))
        start = len(read_steps(f"{d}/rank1.steps"))
    if not wait_steps(f"{d}/rank1.steps", start + KILL_AFTER_STEPS, timeout=180):
        p.kill()
        return {"error": "rank 1 did not train"}
    pid = int(open(f"{d}/rank1.pid").read())
    kill_us = time.time_ns() // 1000
    os.kill(pid, signal.SIGKILL)
    code = p.wait(timeout=600)
    # rank files are appended across restarts: the survivor's gap spans its own restart.
    r = measure(read_steps(f"{d}/rank0.steps"), read_steps(f"{d}/rank1.steps"), kill_us, since_us)
    r["exit_code"] = code
    r["pinned"] = pinned
    return r


def main():
    # --troupe-only: skip torchrun (while working on troupe's side); --keep DIR: keep the job
    # directory, logs and step files there.
    args = sys.argv[1:]
    troupe_only = "--troupe-only" in args
    pinned = "--pin" in args
    sig = signal.SIGTERM if "--sigterm" in args else signal.SIGKILL
    troupe_only = troupe_only or sig == signal.SIGTERM  # the torchrun peer is the SIGKILL run
    keep = args[args.index("--keep") + 1] if "--keep" in args else None
    torchscript = "--torchscript" in args
    binary = [a for a in args if not a.startswith("--") and a != keep][0]
    if keep:
        os.makedirs(keep, exist_ok=True)
        t = troupe_run(binary, keep, pinned, sig, torchscript)
        p = {} if troupe_only else torch_run(keep, pinned)
    else:
        with tempfile.TemporaryDirectory(prefix="troupe-recovery-") as tmp:
            t = troupe_run(binary, tmp, pinned, sig, torchscript)
            p = {} if troupe_only else torch_run(tmp, pinned)
    for name, r in (("troupe", t), ("torchrun", p)):
        if not r:
            continue
        how = "one worker (SIGTERM)" if sig == signal.SIGTERM and name == "troupe" else "one worker (SIGKILL)"
        print(json.dumps({"bench": "recovery", "system": name + (" (torchscript)" if torchscript and name == "troupe" else ""), "workers": 2, "killed": how, **r}))
    if t.get("longest_gap_ms") and p.get("longest_gap_ms"):
        print(json.dumps({"bench": "recovery", "metric": "survivor_longest_gap_ratio_torchrun_over_troupe",
                          "value": p["longest_gap_ms"] / t["longest_gap_ms"],
                          "troupe_gap_over_median": t["gap_over_median"], "target": "<= 2"}))


if __name__ == "__main__":
    main()
