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
system is the reference. One JSON line per run, then a summary. Kill times are the same for both
systems (seeded). Needs the release build and bench/job/export_records.
"""
import argparse
import glob
import json
import os
import random
import signal
import subprocess
import sys
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


def chaos(victims, times, t0, seconds, rng):
    """SIGKILLs a random victim (victims() -> pids) at each of `times` after t0; returns the kills."""
    kills = 0
    for t in times:
        time.sleep(max(0.0, t0 + t - time.time()))
        pids = [p for p in victims() if alive(p)]
        if pids:
            os.kill(rng.choice(pids), signal.SIGKILL)
            kills += 1
    time.sleep(max(0.0, t0 + seconds - time.time()))
    return kills


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
    kills = chaos(lambda: worker_pids(job_dir), kill_times(mean_s, a.seconds, a.seed), t0, a.seconds,
                  random.Random(a.seed))
    samples = troupe_status(a.troupe, job_dir)["samples_total"]
    subprocess.run([a.troupe, "stop", "--job-dir", job_dir], capture_output=True)
    runner.wait()
    model = job_dir + "/exported"
    subprocess.run([a.troupe, "export", job_dir, "--out", model], check=True, capture_output=True)
    test = glob.glob(os.path.join(a.dir, "jobs/datasets/fashion-mnist-*/test"))[0]
    ev = subprocess.run([a.troupe, "evaluate", model, "--data", test, "--root", a.dir + "/jobs", "--quiet"],
                        check=True, capture_output=True, text=True)
    acc = json.loads(ev.stdout.strip().splitlines()[-1])["accuracy"]
    return {"system": "troupe", "mean_s": mean_s, "kills": kills, "samples": samples, "accuracy": acc}


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

    kills = chaos(ranks, kill_times(mean_s, a.seconds, a.seed), t0, a.seconds, random.Random(a.seed))
    steps = int(open(out + "/progress").read())
    agent.send_signal(signal.SIGTERM)
    try:
        agent.wait(timeout=60)
    except subprocess.TimeoutExpired:
        agent.kill()
    acc = accuracy_of(out + "/checkpoint.pt", env["DATA"]) if os.path.exists(out + "/checkpoint.pt") else None
    return {"system": "torchrun", "mean_s": mean_s, "kills": kills, "samples": steps * 64 * a.workers,
            "accuracy": acc}


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
                      "accuracy": {"%s@%gs" % k: v["accuracy"] for k, v in results.items()}}))


if __name__ == "__main__":
    sys.exit(main())
