#!/usr/bin/python3
"""Chaos efficiency, TorchFT's measure (issue 44): a synchronous job whose workers are SIGKILLed at
random (a Poisson process: every 60 s, 15 s, 5 s on average) for a fixed time, its training
efficiency = the samples it trained / the samples the same job trains without faults in the same
time, with its final accuracy; troupe against torchrun (TorchElastic, gloo DDP) under the same kill
schedule, in the same run.

    efficiency.py TROUPE_BIN [--minutes M] [--mean-s 60 15 5] [--workers N] [--only troupe|torchrun]

- troupe: `troupe run examples/fashion_mnist.toml` (MLP 784-256-128-10, Adam, batch 64, allreduce,
  N workers), epochs enough to outlast the run; a kill is SIGKILL to a random running worker
  (nodes.json), the runner launches its replacement. Samples trained: the job's samples_total at
  the end (`troupe status`); then `troupe stop`, `troupe export` (the latest ring checkpoint) and
  `troupe evaluate` on the test set for the accuracy.
- torchrun: the same MLP, data and batch on N ranks (bench/chaos/ddp_fmnist.py), checkpointing every
  500 steps and resuming from it when TorchElastic restarts the workers (it restarts every one when
  one dies; --max-restarts 100000). Samples trained: the global step of rank 0's model at the end
  x 64 x N; accuracy: its latest checkpoint on the test set.
Each (system, rate) runs M minutes (10 by default) after its first step; the fault-free run of each
system is the reference (efficiency). On a shared machine the load drifts between runs by more than
a few kills cost, so each run also measures itself (efficiency_in_run): the samples trained are
read every 0.25 s, and each kill's cost is the samples the run would have trained at its rate of
the 20 s before the kill minus those it trained from 1 s before to 15 s after it (a restart from a
checkpoint shows as samples going back). One JSON line per run, then a summary. Kill times are the same for both
systems (seeded). Needs the release build and bench/job/export_records.
"""
import argparse
import glob
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))


def kill_times(mean_s, seconds, seed):
    rng, t, out = random.Random(seed), 0.0, []
    while mean_s > 0:
        t += rng.expovariate(1.0 / mean_s)
        if t >= seconds:
            return out
        out.append(t)
    return out


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def chaos(victims, times, t0, seconds, rng, progress=None):
    """SIGKILLs a random victim (victims() -> pids) at each of `times` after t0; returns the wall
    times of the kills, and (progress() -> samples trained so far, or None) the samples' series,
    read every 0.25 s."""
    kills, series, stop = [], [], threading.Event()

    def poll():
        while not stop.is_set():
            v = progress()
            if v is not None:
                series.append((time.time(), v))
            stop.wait(0.25)

    poller = threading.Thread(target=poll, daemon=True) if progress else None
    if poller:
        poller.start()
    for t in times:
        time.sleep(max(0.0, t0 + t - time.time()))
        pids = [p for p in victims() if alive(p)]
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills.append(time.time())
    time.sleep(max(0.0, t0 + seconds - time.time()))
    if poller:
        stop.set()
        poller.join()
    return kills, series


def lost_to_kills(series, kills, after_s=15.0):
    """Samples each kill cost the run, measured inside it (the machine's load drift between two runs
    does not move it): for every kill, the samples the run would have trained at its median rate of
    the 20 s before the kill, minus those it did train, from 1 s before the kill to after_s after it
    (cut at the next kill). A restart from a checkpoint shows as samples trained going back."""
    lost = []
    for i, k in enumerate(kills):
        before = [(t, v) for t, v in series if k - 20 <= t <= k - 1]
        rates = [(v1 - v0) / (t1 - t0) for (t0, v0), (t1, v1) in zip(before, before[1:]) if t1 > t0]
        end = min(k + after_s, kills[i + 1] - 1 if i + 1 < len(kills) else k + after_s)
        win = [(t, v) for t, v in series if k - 1 <= t <= end]
        if not rates or len(win) < 2:
            continue
        (t0, v0), (t1, v1) = win[0], win[-1]
        lost.append(max(0.0, statistics.median(rates) * (t1 - t0) - (v1 - v0)))
    return lost


def troupe_status(troupe, job_dir):
    r = subprocess.run([troupe, "status", "--json", "--job-dir", job_dir], capture_output=True, text=True)
    try:
        return json.loads(r.stdout)
    except ValueError:
        return None


def worker_pids(job_dir):
    try:
        nodes = json.load(open(job_dir + "/nodes.json"))
    except (OSError, ValueError):
        return []
    return [n["pid"] for n in nodes.get("nodes", []) if n.get("role") == "worker" and n.get("pid")]


def run_troupe(a, mean_s, tag):
    job = "eff-%s-%d" % (tag, int(time.time()))
    job_dir = os.path.join(a.dir, "jobs", job)
    cmd = [a.troupe, "run", "examples/fashion_mnist.toml", "--workers", str(a.workers), "--job-id", job, "--quiet",
           "--set", "train.epochs=1000", "--set", 'job.root="%s/jobs"' % a.dir]
    runner = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while True:
        s = troupe_status(a.troupe, job_dir) if os.path.exists(job_dir) else None
        if s and s.get("samples_total", 0) > 0:
            break
        if runner.poll() is not None:
            sys.exit("troupe run exited (%d) before its first step; see %s" % (runner.returncode, job_dir))
        time.sleep(0.2)
    t0 = time.time()

    kills, _ = chaos(lambda: worker_pids(job_dir), kill_times(mean_s, a.seconds, a.seed), t0, a.seconds,
                     random.Random(a.seed))
    samples = troupe_status(a.troupe, job_dir)["samples_total"]
    # The samples' series from the job's own timeline (a metrics event a second, every 5 s once the
    # master has run ten minutes), not from polling.
    series = []
    for line in open(job_dir + "/events.jsonl"):
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("kind") == "metrics" and "samples" in e:
            series.append((e["t_ms"] / 1000.0, e["samples"]))
    subprocess.run([a.troupe, "stop", "--job-dir", job_dir], capture_output=True)
    runner.wait()
    model = job_dir + "/exported"
    subprocess.run([a.troupe, "export", job_dir, "--out", model], check=True, capture_output=True)
    test = glob.glob(os.path.join(a.dir, "jobs/datasets/fashion-mnist-*/test"))[0]
    ev = subprocess.run([a.troupe, "evaluate", model, "--data", test, "--root", a.dir + "/jobs", "--quiet"],
                        check=True, capture_output=True, text=True)
    acc = json.loads(ev.stdout.strip().splitlines()[-1])["accuracy"]
    lost = lost_to_kills(series, kills)
    return {"system": "troupe", "mean_s": mean_s, "kills": len(kills), "samples": samples, "accuracy": acc,
            "lost_per_kill": [round(x) for x in lost], "efficiency_in_run": 1 - sum(lost) / samples}


def records(a):
    """The fashion-mnist stores troupe prepared, as arrays for the torchrun peer."""
    prefix = os.path.join(a.dir, "fmnist")
    if not os.path.exists(prefix + ".test.json"):
        cache = glob.glob(os.path.join(a.dir, "jobs/datasets/fashion-mnist-*"))[0]
        tool = os.path.join(os.path.dirname(a.troupe), "bench/job/export_records")
        for part in ("train", "test"):
            subprocess.run([tool, os.path.join(cache, part), prefix + "." + part], check=True, capture_output=True)
    return prefix


def accuracy_of(checkpoint, prefix):
    code = ("import sys,json,numpy as np,torch,torch.nn as nn\n"
            "m=nn.Sequential(nn.Linear(784,256),nn.ReLU(),nn.Linear(256,128),nn.ReLU(),nn.Linear(128,10))\n"
            "m.load_state_dict(torch.load(sys.argv[1])['model']);p=sys.argv[2]\n"
            "meta=json.load(open(p+'.json'))\n"
            "x=torch.from_numpy(np.fromfile(p+'.dense.f32',dtype=np.float32).reshape(meta['rows'],784))\n"
            "y=np.fromfile(p+'.labels.f32',dtype=np.float32)\n"
            "print(float((m(x).argmax(1).numpy()==y).mean()))\n")
    r = subprocess.run(["/usr/bin/python3", "-c", code, checkpoint, prefix + ".test"], check=True,
                       capture_output=True, text=True)
    return float(r.stdout.strip())


def run_torchrun(a, mean_s, tag):
    out = os.path.join(a.dir, "torchrun-%s-%d" % (tag, int(time.time())))
    os.makedirs(out)
    env = dict(os.environ, OUT=out, DATA=records(a), CKPT_STEPS="500")
    cmd = ["/usr/bin/python3", "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=%d" % a.workers,
           "--max_restarts=100000", "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:29561",
           # torch 1.13 on Python 3.11: the default "0" (Std.NONE) parses to None and crashes the agent.
           "--redirects", "1", "--tee", "1", "--log_dir=%s/logs" % out, os.path.join(HERE, "ddp_fmnist.py")]
    agent = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not os.path.exists(out + "/progress"):
        if agent.poll() is not None:
            sys.exit("torchrun exited (%d) before its first step; see %s/logs" % (agent.returncode, out))
        time.sleep(0.2)
    t0 = time.time()

    def ranks():
        pids = []
        for f in glob.glob(out + "/rank*.pid"):
            try:
                pids.append(int(open(f).read()))
            except (OSError, ValueError):
                pass
        return pids

    def trained():
        try:
            return int(open(out + "/progress").read()) * 64 * a.workers
        except (OSError, ValueError):
            return None

    kills, series = chaos(ranks, kill_times(mean_s, a.seconds, a.seed), t0, a.seconds, random.Random(a.seed),
                          trained)
    steps = int(open(out + "/progress").read())
    agent.send_signal(signal.SIGTERM)
    try:
        agent.wait(timeout=60)
    except subprocess.TimeoutExpired:
        agent.kill()
    acc = accuracy_of(out + "/checkpoint.pt", env["DATA"]) if os.path.exists(out + "/checkpoint.pt") else None
    lost = lost_to_kills(series, kills)
    return {"system": "torchrun", "mean_s": mean_s, "kills": len(kills), "samples": steps * 64 * a.workers,
            "accuracy": acc, "lost_per_kill": [round(x) for x in lost],
            "efficiency_in_run": 1 - sum(lost) / (steps * 64 * a.workers)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("troupe")
    p.add_argument("--minutes", type=float, default=10)
    p.add_argument("--mean-s", type=float, nargs="*", default=[60, 15, 5])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--only", choices=["troupe", "torchrun"])
    p.add_argument("--seed", type=int, default=44)
    p.add_argument("--dir", default="/var/tmp/troupe-chaos-efficiency")
    a = p.parse_args()
    a.troupe = os.path.abspath(a.troupe)
    a.seconds = a.minutes * 60
    os.makedirs(os.path.join(a.dir, "jobs"), exist_ok=True)
    systems = [s for s in (("troupe", run_troupe), ("torchrun", run_torchrun)) if a.only in (None, s[0])]
    results = {}
    for mean_s in [0] + a.mean_s:
        for name, run in systems:
            r = run(a, mean_s, "clean" if mean_s == 0 else "every%gs" % mean_s)
            r.update({"seconds": a.seconds, "workers": a.workers, "load": os.getloadavg()[0]})
            base = results.get((name, 0))
            r["efficiency"] = r["samples"] / base["samples"] if base else 1.0
            results[(name, mean_s)] = r
            print(json.dumps(r), flush=True)
    print(json.dumps({"summary": True, "efficiency": {"%s@%gs" % k: v["efficiency"] for k, v in results.items()},
                      "efficiency_in_run": {"%s@%gs" % k: v["efficiency_in_run"] for k, v in results.items()},
                      "accuracy": {"%s@%gs" % k: v["accuracy"] for k, v in results.items()}}))


if __name__ == "__main__":
    sys.exit(main())
