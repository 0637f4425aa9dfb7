#!/usr/bin/python3
"""ElasticDL's cluster experiments with troupe on the repo's Slurm cluster (issue 15).

Starts scripts/slurm-cluster.sh with 4 hosts x 6 CPUs (24 Slurm CPUs, ElasticDL's cluster), submits
a schedule of troupe jobs, and collects from Slurm itself (sacct through slurmdbd: every Slurm job's
submit/start/end, CPUs, state; sinfo samples of allocated CPUs every second) and from troupe (each
job's events.jsonl and result.json). One JSON file per run (schema: docs/cluster_experiments.md),
then the plots (bench/cluster/plots.py).

  gang_vs_elastic  two DeepFM jobs of 13 CPUs each (3 control + 10 workers), the second submitted
                   30 s after the first. gang: each job ONE Slurm allocation of 13 CPUs
                   (bench/cluster/gang_run.sh); elastic: troupe's Slurm launcher, 10 workers of the
                   job's own in `low` and up to 11 more in `spare` (min_workers 1).
  colocation       a "service" in the high partition scaled 2 -> 10 -> 4 -> 12 -> 2 CPUs (one
                   Slurm job per replica) beside one elastic troupe job filling the rest; the
                   service's start latency is compared with the same scale-up preempting plain
                   `sleep` jobs (Slurm's own latency).
  trace            Poisson arrivals of jobs of mixed sizes and priorities, gang vs elastic (vs goodput).
  trace_heavy      the same at about twice the load: 24 jobs, a mean gap of 6 s instead of 12.
  trace_mixed, trace_mixed_heavy   the same schedules with every other job (t00, t02, ...) a
                   synchronous MLP job keeping its global batch (bench/cluster/sync_jobs.py): its
                   speedup flattens as it grows, over links shaped by --link-rate.
  sync_scaling     one such sync job alone, resized 1 -> 2 -> 4 -> 8 -> 12: its measured speedup.

Modes: gang, elastic (today's policy: each job's own workers in its partition, up to twice as many in
`spare`, Slurm's preemption between partitions), goodput (issue #48: every job in `low`, no spare; a
Pollux policy -- bench/cluster/goodput_policy.py -- reallocates the worker CPUs among the running
jobs every --period seconds and at each arrival and completion, through `troupe scale`; an arriving
job starts with its share of that round; with --spare the async jobs also keep spare workers up to
their maximum, as under elastic, on the CPUs the policy leaves idle). Elastic and goodput admit a job (start its `troupe run`)
once its control plane and one worker (--admission-workers K: K) fit beside those of the jobs in the
system (--no-admission: at its arrival, however full; its completion time counts from its arrival
either way).

Every worker is paced ([train] max_samples_per_s) so that one Slurm CPU stands for a bounded share
of this machine's real cores: see docs/cluster_experiments.md for what that means for the figures.
Usage: experiments.py TROUPE_BIN [--only NAMES] [--out DIR] [--scale F] [--modes gang,elastic,goodput]
                      [--period S] [--restart-delay S] [--async-efficiency none|batch] [--no-admission]
                      [--admission-workers K] [--pack [--drain]] [--spare] [--link-rate RATE] [--sync-fraction R]
                      [--pollux-policy FILE] [--link-rate 100mbit] [--sync-fraction R]
                      (root; the cluster's lock)
"""
import argparse
import collections
import json
import os
import random
import shutil
import subprocess
import sys
import threading
import time
import types

import sync_jobs

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SLURM = os.path.join(REPO, "scripts", "slurm-cluster.sh")
CPUS_PER_HOST, HOSTS = 6, 4
PACE = 1500  # samples/s per worker


def sh(*cmd, check=True):
    r = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def sbatch(*args):
    """Submits a batch job (sbatch --parsable ARGS...); its Slurm job id."""
    return int(sh("sbatch", "--parsable", *args).strip().split(";")[0])


def sleeper(name, partition, *opts):
    """A 1-CPU job that only holds its allocation (`exec sleep`: SIGTERM ends it at once)."""
    return sbatch(*opts, "-p", partition, "-n", "1", "-J", name, "-o", "/dev/null", "--wrap", "exec sleep 100000")


def log(msg):
    print(f"[experiments {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def cluster_up():
    env = dict(os.environ, TROUPE_SLURM_CPUS=str(CPUS_PER_HOST), TROUPE_SLURM_NODES=str(HOSTS),
               TROUPE_SLURM_MEM="16000")
    subprocess.run(["bash", SLURM, "down"], env=env, check=False, capture_output=True)
    subprocess.run(["bash", SLURM, "up"], env=env, check=True)


def make_data(work, bin_, rows):
    d = os.path.join(work, "data")
    train, test = os.path.join(d, f"train-{rows}"), os.path.join(d, "test")
    os.makedirs(d, exist_ok=True)
    if not os.path.exists(os.path.join(train, "data.mdb")):
        sh(bin_, "data", "synth-ctr", "--rows", str(rows), "--fields", "6", "--vocab", "50",
           "--seed", "1", "--out", train)
    if not os.path.exists(os.path.join(test, "data.mdb")):
        sh(bin_, "data", "synth-ctr", "--rows", "10000", "--fields", "6", "--vocab", "50",
           "--seed", "2", "--out", test)
    return train, test


def job_toml(root, name, data, epochs, workers, min_w, max_w, shards=2, pace=PACE):
    return sync_jobs.job_section(root, name, "async_ps", workers, min_w, max_w, 1024) + f"""[ps]
shards = {shards}
checkpoint_every_ms = 2000
[model]
type = "deepfm"
embedding_dim = 8
hidden = [32]
[train]
epochs = {epochs}
batch_size = 128
optimizer = "adam"
learning_rate = 0.01
max_samples_per_s = {pace}
[data]
source = "store"
train = "{data[0]}"
test = "{data[1]}"
"""


def elastic_cluster(control_host, spare=True, own_partition="low"):
    return f"""[cluster]
launcher = "slurm"
control_partition = "high"
control_host = "{control_host}"
worker_partition = "{own_partition}"
spare_partition = "{'spare' if spare else ''}"
worker_cpus = 1
"""


class Sampler(threading.Thread):
    """sinfo's allocated CPUs every `period` s: the cluster's own view of utilisation."""

    def __init__(self, t0, period=1.0):
        super().__init__(daemon=True)
        self.t0, self.period, self.samples, self.stop = t0, period, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            out = sh("sinfo", "-h", "-p", "low", "-o", "%C", check=False).strip()
            if out.count("/") == 3:
                a, _i, _o, t = (int(x) for x in out.split("/"))
                self.samples.append({"t": time.time() - self.t0, "allocated": a, "total": t})
            self.stop.wait(self.period)


def slurm_time(s):
    if not s or s in ("Unknown", "None"):
        return None
    return time.mktime(time.strptime(s, "%Y-%m-%dT%H:%M:%S"))


def allocations(t0, t_end):
    """Every Slurm job since t0 from sacct (slurmdbd), each requeued segment its own row."""
    iso = lambda t: time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(t))  # noqa: E731
    out = sh("sacct", "-a", "-X", "-D", "-n", "-P", "-S", iso(t0 - 1), "-E", iso(t_end + 1),
             "-o", "JobIDRaw,JobName%80,Partition,AllocCPUS,Submit,Start,End,State")
    rows = []
    for line in out.splitlines():
        f = line.split("|")
        if len(f) < 8:
            continue
        name = f[1]
        owner, role = owner_role(name)
        start, end = slurm_time(f[5]), slurm_time(f[6])
        submit = slurm_time(f[4])
        if submit is None or submit < int(t0):
            continue  # an earlier run's job (sacct -S selects by time window, not by submission)
        rows.append({"slurm_job": int(f[0].split("_")[0]) if f[0].split("_")[0].isdigit() else 0,
                     "name": name, "owner": owner, "role": role, "partition": f[2],
                     "cpus": int(f[3] or 0), "submit": rel(submit, t0),
                     "start": rel(start, t0), "end": rel(end, t0), "state": f[7].split()[0]})
    return rows


def rel(t, t0):
    return None if t is None else round(t - t0, 3)


def owner_role(name):
    # troupe-<job id>:<node>, gang:<job id>, service:<n>, filler:<n>
    if name.startswith("troupe-") and ":" in name:
        job, node = name[len("troupe-"):].split(":", 1)
        return job, node.split("-")[0]
    if ":" in name:
        kind, rest = name.split(":", 1)
        return (rest, "gang") if kind == "gang" else (kind, kind)
    return name, "other"


def job_record(job_dir, name, t0, submit, extra):
    """troupe's own view of a job: result.json, and events.jsonl as timeline + membership events."""
    rec = {"name": name, "submit": round(submit - t0, 3), "first_step": None, "end": None,
           "timeline": [], "events": [], "result": {}}
    rec.update(extra)
    try:
        with open(os.path.join(job_dir, "result.json")) as f:
            res = json.load(f)
        rec["result"] = {k: res.get(k) for k in ("status", "reason", "test_auc", "test_accuracy", "samples_trained",
                                                 "tasks_done", "tasks_failed", "tasks_requeued", "node_restarts")}
        if res.get("first_step_wall_ms"):
            rec["first_step"] = round(res["first_step_wall_ms"] / 1000 - t0, 3)
    except (OSError, ValueError) as e:
        rec["result"] = {"status": f"no result.json: {e}"}
    try:
        with open(os.path.join(job_dir, "events.jsonl")) as f:
            lines = f.read().splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue  # a torn last line
        t = round(e.get("t_ms", 0) / 1000 - t0, 3)
        if e.get("kind") == "metrics":
            rec["timeline"].append({"t": t, "samples_per_s": e.get("samples_per_s", 0),
                                    "loss": e.get("loss"), "workers": e.get("workers_alive", 0),
                                    "samples": e.get("samples", 0)})
        elif e.get("kind") == "job_end":
            rec["end"] = t
        elif e.get("kind") not in ("job_start",):
            rec["events"].append({"t": t, "kind": e.get("kind"), "node": e.get("node", "")})
    return rec


def unfinished(run):
    """The jobs of a run that did not finish (the colocation reference too), as (name, why)."""
    jobs = list(run.get("jobs", []))
    if run.get("reference") is not None:
        jobs.append({"name": "reference", "result": run["reference"]})
    out = []
    for j in jobs:
        res = j.get("result") or {}
        if res.get("status") != "finished":
            why = res.get("status") or "no status"
            if res.get("reason"):
                why += ": " + res["reason"]
            out.append((j.get("name", "?"), why))
    return out


def check_finished(runs):
    """A benchmark whose jobs did not finish measured nothing: exits non-zero naming each job and
    why it ended (the runs' JSON stays on disk, for the post-mortem)."""
    bad = [f"{r['experiment']}/{r['mode']}: {name} ({why})" for r in runs for name, why in unfinished(r)]
    if bad:
        sys.exit(f"experiments.py: {len(bad)} job(s) did not finish, no result: " + "; ".join(bad))


def wait_gone(names, timeout):
    """Until no Slurm job with one of these names is queued or running."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        q = sh("squeue", "-h", "-o", "%j", check=False).split()
        if not any(n in q for n in names):
            return True
        time.sleep(1)
    return False


def submit_gang(bin_, work, file, job_id, cpus, partition="low"):
    return sbatch("-J", f"gang:{job_id}", "-p", partition, "-n", str(cpus),
                  "--output", os.path.join(work, f"{job_id}.gang.out"), "--chdir", work,
                  os.path.join(HERE, "gang_run.sh"), bin_, file, job_id)


def start_elastic(bin_, work, file, job_id):
    out = open(os.path.join(work, f"{job_id}.runner.out"), "w")
    return subprocess.Popen([bin_, "run", file, "--job-id", job_id, "--quiet"], stdout=out,
                            stderr=subprocess.STDOUT, cwd=work)


def fresh_dir(work):
    """The run's directory, emptied: job ids repeat between runs."""
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "jobs"))
    return work


def control_cpus(shards):
    return 1 + shards  # the master and the PS shards, one Slurm CPU each


class PolicyLoop(threading.Thread):
    """Runs the goodput policy (goodput_policy.py) over the run's running elastic jobs: every
    `period` s and whenever a job finishes, `troupe status --json` of each, the new allocation,
    `troupe scale` where it changed (the shrinks first, so that the CPUs the grows wait for are on
    their way back). An arriving job waits in the loop (`admit`) and is admitted by the first
    round at which the run's admission rule lets it in: that round counts it and it starts with its
    share. Records every round and each resize's latency (the scale command to the job's alive
    workers reaching the target)."""

    def __init__(self, args, t0, work):
        super().__init__(daemon=True)
        import goodput_policy  # noqa: E402  (bench/cluster/goodput_policy.py)
        self.gp = goodput_policy
        self.pp = goodput_policy.load_pollux_policy(args.pollux_policy)
        self.policy = goodput_policy.GoodputPolicy(self.pp, CPUS_PER_HOST * HOSTS, HOSTS, args.restart_delay,
                                                   async_efficiency=args.async_efficiency, pack=args.pack)
        self.args, self.t0, self.work = args, t0, work
        self.period = max(2.0, args.period * args.scale) if args.period_scales else args.period
        self.jobs, self.done, self.lock, self.round_lock = {}, set(), threading.Lock(), threading.Lock()
        self.wake, self.stop = threading.Event(), threading.Event()
        self.rounds, self.resizes, self.pending, self.shards = [], [], {}, {}
        self.drains = []      # --drain: the shrinks that named a host
        self.first_host = {}  # --pack: the host an arriving sync job's workers start on
        self.waiting = None   # the arriving job a round admits once its admission rule lets it in
        self.ended = False    # a job ended since the last round
        self.workers = {}     # --pack: this round's Slurm view, job name -> [(index, host)]
        self.placed = {}      # --pack: this round's placements, job name -> host

    def admit(self, j, submitted, fits=lambda: True):
        """The workers job `j` starts with, once admitted (blocks until then): the first round at
        which `fits()` (the run's admission rule) holds admits it -- a completion's round included,
        so the CPUs a completion frees are shared with the job it lets in, not given to the running
        jobs and taken back a moment later by the arrival's own round (the runs before 2026-11-29:
        a job resized up and down within a second, each grow a Slurm submission) -- and it starts
        with its share of that round (the others shrunk)."""
        sync = j.get("kind") == "sync"
        new = self.gp.JobState(j["name"], "allreduce" if sync else "async_ps", 128, j["max_workers"], submitted,
                               batch="global" if sync else "fixed")
        self.shards[j["name"]] = j["shards"]
        w = types.SimpleNamespace(job=new, fits=fits, done=threading.Event(), share=None, host=None)
        self.waiting = w
        self.wake.set()
        while not w.done.wait(0.5):
            if not self.is_alive():
                raise RuntimeError(f"goodput policy loop ended with {new.name} waiting for admission")
        start = max(1, w.share or 1)
        new.target = start
        if sync and w.host:
            self.first_host[new.name] = w.host
        with self.lock:
            self.jobs[j["name"]] = new
        return start

    def status(self, name):
        r = subprocess.run([self.args.bin, "status", "--json", "--job-dir", os.path.join(self.work, "jobs", name)],
                           capture_output=True, text=True, timeout=20)
        try:
            return json.loads(r.stdout) if r.returncode == 0 else None
        except ValueError:
            return None

    def run(self):
        """Rounds: when a job ends, every `period` s since the last round, and for a job waiting for
        admission at most 0.5 s after its admission rule holds (that round admits it)."""
        last = time.time()
        while not self.stop.is_set():
            wait = self.period - (time.time() - last)
            self.wake.wait(max(0.0, min(wait, 0.5) if self.waiting else wait))
            self.wake.clear()
            if self.stop.is_set():
                break
            w = self.waiting
            with self.lock:
                ended, self.ended = self.ended, False
            try:
                if w is not None and w.fits():
                    w.share, w.host = self.round(w.job)
                    self.waiting = None
                    w.done.set()
                elif ended or time.time() - last >= self.period:
                    self.round()
                else:
                    continue
            except Exception as e:  # noqa: BLE001  (a round that fails is logged; the next one tries again)
                log(f"goodput policy: round failed: {e}")
            last = time.time()

    def survey(self, now):
        """(jobs reporting, CPUs held by the others: control planes and the workers not yet seen)."""
        with self.lock:
            names = [n for n in self.jobs if n not in self.done]
        running, held = [], 0
        for n in names:
            st = self.status(n)
            if st is not None and (st.get("finished") or st.get("state") in ("finished", "failed", "stopped")):
                with self.lock:
                    self.done.add(n)
                continue
            held += control_cpus(self.shards.get(n, 1))  # its master and shards hold theirs from submission on
            job = self.jobs[n]
            if st is None or (not st.get("workers_alive") and not st.get("samples_total")):
                held += job.target  # not answering, or no worker joined yet: its workers are on their way
                continue
            job.update(st)
            running.append(job)
            want = self.pending.get(n)
            if want and job.workers >= want[1]:
                self.resizes.append({"job": n, "t": round(want[0] - self.t0, 3), "to": want[1],
                                     "seconds": round(now - want[0], 3)})
                del self.pending[n]
        return running, held

    def slurm_view(self, jobs):
        """--pack: the free CPUs per host and each job's workers by host (slurm_view_of), into
        job.hosts and self.workers."""
        spare = sh("squeue", "-h", "-p", "spare", "-t", "R", "-o", "%N", check=False) if self.args.spare else ""
        idle, self.workers = slurm_view_of(sh("sinfo", "-h", "-N", "-p", "low", "-o", "%N|%C", check=False),
                                           sh("squeue", "-h", "-p", "low", "-t", "R,PD", "-o", "%j|%T|%N|%n",
                                              check=False), spare)
        for j in jobs:
            j.hosts.clear()
            j.hosts.update(h for _, h in self.workers.get(j.name, []))
        return idle

    def leaving(self, job, n):
        """The hosts of the workers `job` loses going down to n: the highest indices, or with --drain
        those on its drain_host first."""
        host = self.drained(job)
        order = sorted(self.workers.get(job.name, []), key=lambda w: (w[1] != host, -w[0]))
        return [h for _, h in order[:max(0, job.target - n)]]

    def drained(self, job):
        """--drain: the host a shrink of `job` drains (drain_host), else None."""
        return drain_host(job.strategy, self.workers.get(job.name, [])) if self.args.drain else None

    def round(self, new=None):
        """One reallocation; with `new` (an arriving job, not running yet) its share and the host
        --pack placed it on (or None) are returned."""
        with self.round_lock:
            now = time.time()
            running, held = self.survey(now)
            if new is not None:
                held += control_cpus(self.shards.get(new.name, 1))
                running.append(new)
            cpus = CPUS_PER_HOST * HOSTS - held
            self.placed = {}
            if self.args.pack:
                idle = self.slurm_view(running)
                alloc, self.placed = self.policy.allocate_placed(running, max(0, cpus), now, idle, self.leaving)
            else:
                alloc = self.policy.allocate(running, max(0, cpus), now)
            rec = {"t": round(now - self.t0, 3), "worker_cpus": cpus, "jobs": {}}
            for job, a in zip(running, alloc):
                rec["jobs"][job.name] = {"alive": job.workers, "target": a, "noise_scale": (
                    job.grad[1] / job.grad[0] * job.grad[2]) if job.grad and job.grad[0] > 0 else None,
                    "per_worker": job.per_worker}
                if job.name in self.placed:
                    rec["jobs"][job.name].update(host=self.placed[job.name], room=job.room,
                                                 hosts=dict(job.hosts))
            self.rounds.append(rec)
            changes = [(j, a) for j, a in zip(running, alloc) if j is not new and a != j.target and a > 0]
            # The shrinks first, then the grows placed on a host (their workers queue there first).
            for job, a in sorted(changes, key=lambda c: (c[1] > c[0].target, c[0].name not in self.placed,
                                                         c[1] - c[0].target)):
                self.scale(job, a, self.placed.get(job.name) if a > job.target else self.drained(job))
            if new is not None:
                return (alloc[-1], self.placed.get(new.name)) if alloc else (None, None)
            return None

    def scale(self, job, a, host=None):
        r = subprocess.run([self.args.bin, "scale", "--workers", str(a), "--job-dir",
                            os.path.join(self.work, "jobs", job.name)] + (["--host", host] if host else []),
                           capture_output=True, text=True, timeout=20)
        if r.returncode != 0:
            log(f"goodput policy: scale {job.name} to {a}: {r.stderr.strip()[:200]}")
            return
        if a > job.target:
            self.pending[job.name] = (time.time(), a)
        elif host:
            self.drains.append({"job": job.name, "t": round(time.time() - self.t0, 3), "to": a, "host": host})
        self.policy.charge(job, a)

    def job_ended(self, name):
        with self.lock:
            self.done.add(name)
            self.ended = True
        self.wake.set()


def drain_host(strategy, workers):
    """--drain: the host a shrink of a job drains (`troupe scale --host` on a shrink: the job's workers
    there leave first), from its workers' [(index, host)]: an allreduce job's host with the fewest of
    them (its ring is left on fewer hosts), an async job's with the most (the CPUs it frees make a
    block on one host, where a ring fits); None when they are on one host or none."""
    by = collections.Counter(h for _, h in workers)
    if len(by) < 2:
        return None
    pick = min if strategy == "allreduce" else max
    return pick(sorted(by), key=lambda h: by[h])


def slurm_view_of(sinfo_out, squeue_out, spare_out=""):
    """(free CPUs per host, {job: [(worker index, host)]}) from `sinfo -N -o %N|%C` and `squeue -o
    %j|%T|%N|%n`: a running worker's host is where it runs, a pending one's the host it was placed on
    (its requested node, if any), whose free CPUs it is counted against. `spare_out` (`squeue -p
    spare -t R -o %N`): the hosts of running spare workers, whose CPUs count as free (any job's own
    worker preempts them)."""
    idle, workers = {}, {}
    for line in sinfo_out.splitlines():
        node, _, cpus = line.partition("|")
        if cpus.count("/") == 3:
            idle[node] = int(cpus.split("/")[1])
    for host in spare_out.split():
        if host in idle:
            idle[host] += 1
    for line in squeue_out.splitlines():
        f = line.split("|")
        if len(f) < 4:
            continue
        owner, role = owner_role(f[0])
        index = f[0].rsplit("-", 1)[-1]
        host = f[2] if f[1] == "RUNNING" else f[3]
        if f[1] != "RUNNING" and host in idle:
            idle[host] = max(0, idle[host] - 1)
        if role == "worker" and host and index.isdigit():
            workers.setdefault(owner, []).append((int(index), host))
    return idle, workers


def admission_fits(args, j, admitted, runners):
    """--admission: whether job `j`'s control plane and K workers (--admission-workers, default 1)
    fit beside those of the jobs in the system, each counted with K (the jobs' own further workers
    do not count: they wait in Slurm's queue). Without it, at twice the load the control planes
    (which preempt workers from `high`) filled the cluster and no job had a worker left to finish.
    With K = 1 at twice the load, the control planes of the many jobs admitted hold most of the CPUs
    (docs/cluster_experiments.md)."""
    k = args.admission_workers
    held = sum(control_cpus(a["shards"]) + k for n, a in admitted.items() if runners[n].poll() is None)
    return held + control_cpus(j["shards"]) + k <= CPUS_PER_HOST * HOSTS


def admission_open(args, j, t0, admitted, runners):
    """Whether job `j` may start now: without --admission always, else once admission_fits, or at
    the run's timeout (first come, first served: the caller asks for the next arrival only)."""
    return not args.admission or time.time() - t0 >= args.timeout or admission_fits(args, j, admitted, runners)


def admission_wait(args, j, t0, admitted, runners):
    """Returns once admission_open."""
    while not admission_open(args, j, t0, admitted, runners):
        time.sleep(0.5)


def run_schedule(args, exp, mode, schedule, data_for):
    """Submits each job of `schedule` ({at, name, workers, max_workers, shards, epochs, priority,
    rows}) at its time (elastic and goodput with --admission: once it is admitted; its completion
    time still counts from its arrival); returns the run's record once every job has ended."""
    work = fresh_dir(os.path.join(args.out, exp, mode))
    t0 = time.time()
    sampler = Sampler(t0)
    sampler.start()
    runners, gangs, jobs, admitted = {}, [], [], {}
    policy = PolicyLoop(args, t0, work) if mode == "goodput" else None
    if policy:
        policy.start()
        watcher = threading.Thread(target=watch_runners, args=(runners, policy), daemon=True)
        watcher.start()
    for k, j in enumerate(sorted(schedule, key=lambda j: j["at"])):
        time.sleep(max(0.0, t0 + j["at"] - time.time()))
        arrived = time.time()
        sync = j.get("kind") == "sync"
        data = None if sync else data_for(j["rows"])
        gang = mode == "gang"
        if policy:  # admitted by a round of the policy, with its share of it
            start = policy.admit(j, arrived, fits=lambda j=j: admission_open(args, j, t0, admitted, runners))
        else:
            if not gang:
                admission_wait(args, j, t0, admitted, runners)
            start = j["workers"]
        lo, hi = (j["workers"], j["workers"]) if gang else (1, j["max_workers"])
        first_host = policy.first_host.get(j["name"]) if policy else None
        if sync:
            text = sync_jobs.sync_job_toml(os.path.join(work, "jobs"), j["name"], j["rows"], start, lo, hi)
        else:
            text = job_toml(os.path.join(work, "jobs"), j["name"], data, j["epochs"], start, lo, hi, shards=j["shards"])
        if policy:
            # --spare: not for a sync job (a spare worker would join its ring wherever Slurm puts it).
            text += elastic_cluster(f"h{k % HOSTS + 1}", spare=args.spare and not sync, own_partition="low")
            if first_host:  # --pack: its workers start on the host the round placed it on
                text += f'worker_host = "{first_host}"\n'
        elif not gang:
            # Control planes spread over the hosts, as a cluster's login/service nodes would be.
            text += elastic_cluster(f"h{k % HOSTS + 1}", own_partition="high" if j["priority"] == "high" else "low")
        file = os.path.join(work, f"{j['name']}.toml")
        with open(file, "w") as f:
            f.write(text)
        if gang:
            submit_gang(args.bin, work, file, j["name"], control_cpus(j["shards"]) + j["workers"],
                        partition="high" if j["priority"] == "high" else "low")
            gangs.append(f"gang:{j['name']}")
        else:
            runners[j["name"]] = start_elastic(args.bin, work, file, j["name"])
            admitted[j["name"]] = j
        log(f"{exp}/{mode}: submitted {j['name']} ({start} workers, {j['priority']}, "
            f"admitted {time.time() - arrived:.1f} s after its arrival)")
        jobs.append((j, arrived, time.time()))
    if gangs and not wait_gone(gangs, args.timeout):
        log(f"{exp}/{mode}: gang jobs still queued after {args.timeout} s; cancelling")
        sh("scancel", "-n", ",".join(gangs), check=False)
    for name, p in runners.items():
        try:
            p.wait(timeout=max(1, args.timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            log(f"{exp}/{mode}: {name} still running after {args.timeout} s; stopping it")
            p.terminate()
            p.wait()
    t_end = time.time()
    sampler.stop.set()
    if policy:
        policy.stop.set()
        policy.wake.set()
        policy.join(timeout=30)
    time.sleep(5)  # slurmdbd records the last job ends
    run = {"experiment": exp, "mode": mode, "cluster_cpus": CPUS_PER_HOST * HOSTS, "t0": t0,
           "t_end": round(t_end - t0, 3), "pace_samples_per_s": PACE, "admission": bool(args.admission),
           "admission_workers": args.admission_workers,
           "allocations": allocations(t0, t_end), "sinfo": sampler.samples, "jobs": []}
    if args.link_rate:
        run["link_rate"], run["sync_fraction"] = args.link_rate, args.sync_fraction
    if policy:
        run["policy"] = {"period": policy.period, "restart_delay": args.restart_delay, "rounds": policy.rounds,
                         "resizes": policy.resizes, "async_efficiency": args.async_efficiency, "pack": args.pack,
                         "drain": args.drain, "drains": policy.drains, "spare": args.spare}
    for j, arrived, started in jobs:
        extra = {k: j[k] for k in ("priority", "workers", "max_workers", "epochs")}
        extra["kind"] = j.get("kind", "async")
        extra["min_workers"] = j["workers"] if mode == "gang" else 1
        extra["admitted"] = round(started - t0, 3)
        run["jobs"].append(job_record(os.path.join(work, "jobs", j["name"]), j["name"], t0, arrived, extra))
    return run


def watch_runners(runners, policy):
    """Tells the policy at once when a job's runner exits (a completion frees its CPUs)."""
    seen = set()
    while not policy.stop.is_set():
        for name, p in list(runners.items()):
            if name not in seen and p.poll() is not None:
                seen.add(name)
                policy.job_ended(name)
        time.sleep(0.5)


def gang_vs_elastic(args):
    rows = int(150000 * args.scale)
    two = [{"at": 0, "name": "job-a", "workers": 10, "max_workers": 21, "shards": 2, "epochs": 12,
            "priority": "low", "rows": rows},
           {"at": 30 * args.scale, "name": "job-b", "workers": 10, "max_workers": 21, "shards": 2,
            "epochs": 12, "priority": "low", "rows": rows}]
    return [run_schedule(args, "gang_vs_elastic", mode, two, lambda r: make_data(args.out, args.bin, r))
            for mode in args.modes]


def trace_schedule(args, n=16, mean_gap=12.0, seed=7, mixed=False):
    """Poisson arrivals; with `mixed` every other job (t00, t02, ...) a sync job (sync_jobs.py) as
    long at its own workers as the async job it replaces (the same draws: the same arrivals)."""
    rng = random.Random(seed)
    t, jobs = 0.0, []
    for i in range(n):
        w = rng.choice([2, 4, 6, 8])
        dur = rng.uniform(20, 60) * args.scale  # seconds the job takes at w paced workers
        rows = 50000
        jobs.append({"at": round(t, 1), "name": f"t{i:02d}", "workers": w, "max_workers": 2 * w, "shards": 1,
                     "epochs": max(1, round(w * PACE * dur / rows)), "rows": rows,
                     "priority": "high" if rng.random() < 0.25 else "low"})
        if mixed and i % 2 == 0:
            jobs[-1].update(kind="sync", shards=0, epochs=1,
                            rows=sync_jobs.rows_for(dur, w, getattr(args, "sync_fraction", 0.3)))
        t += rng.expovariate(1.0 / (mean_gap * args.scale))
    return jobs


def trace(args):
    jobs = trace_schedule(args)
    return [run_schedule(args, "trace", mode, jobs, lambda r: make_data(args.out, args.bin, r))
            for mode in args.modes]


def trace_heavy(args):
    """The trace at about twice the load: 24 jobs arriving every 6 s on average (issue #48)."""
    jobs = trace_schedule(args, n=24, mean_gap=6.0, seed=11)
    return [run_schedule(args, "trace_heavy", mode, jobs, lambda r: make_data(args.out, args.bin, r))
            for mode in args.modes]


def trace_mixed(args):
    jobs = trace_schedule(args, mixed=True)
    return [run_schedule(args, "trace_mixed", mode, jobs, lambda r: make_data(args.out, args.bin, r))
            for mode in args.modes]


def trace_mixed_heavy(args):
    jobs = trace_schedule(args, n=24, mean_gap=6.0, seed=11, mixed=True)
    return [run_schedule(args, "trace_mixed_heavy", mode, jobs, lambda r: make_data(args.out, args.bin, r))
            for mode in args.modes]


def sync_scaling(args):
    return sync_jobs.sync_scaling(args, start_elastic, elastic_cluster, fresh_dir, log)


class Service:
    """An online service in the high partition: one Slurm job of 1 CPU per replica (a `sleep`:
    its allocation is the point, not its CPU use), scaled by submitting and cancelling replicas."""

    def __init__(self, name, t0):
        self.name, self.t0, self.ids, self.n, self.log, self.latency = name, t0, [], 0, [], []

    def running(self):
        return sum(1 for j in sh("squeue", "-h", "-t", "R", "-o", "%j", check=False).split()
                   if j.startswith(self.name + ":"))

    def scale(self, want, timeout=90):
        t = time.time()
        while len(self.ids) > want:
            sh("scancel", str(self.ids.pop()), check=False)
        added = want - len(self.ids)
        while len(self.ids) < want:
            self.n += 1
            self.ids.append(sleeper(f"{self.name}:{self.n}", "high"))
        self.log.append({"t": round(t - self.t0, 3), "replicas_wanted": want, "replicas_running": self.running()})
        if added <= 0:
            return None
        while self.running() < want and time.time() - t < timeout:
            time.sleep(0.1)
        up = time.time() - t
        self.log.append({"t": round(time.time() - self.t0, 3), "replicas_wanted": want, "replicas_running": self.running()})
        self.latency.append({"t": round(t - self.t0, 3), "added": added, "seconds": round(up, 3)})
        return up

    def stop(self):
        self.scale(0)


def fill_with_sleepers(partitions, tag):
    """One `sleep` job of 1 CPU per entry of `partitions` (its partition). --signal=B:TERM: the batch
    shell (here the sleep) gets Slurm's SIGTERM at preemption, as a troupe node does; without it
    Slurm waits out GraceTime and kills it."""
    return [sleeper(f"filler:{tag}-{i}", p, "--no-requeue", "--signal=B:TERM@30") for i, p in enumerate(partitions)]


def wait_running(n_min, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if len(sh("squeue", "-h", "-t", "R", "-o", "%i", check=False).split()) >= n_min:
            return True
        time.sleep(0.5)
    return False


def slurm_own_latency(args, pattern, own_workers, rounds=2):
    """The service's biggest scale-up when the CPUs it needs are held by `sleep` jobs shaped as the
    training job's nodes (3 in high, `own_workers` in low, the rest in spare; they end at SIGTERM at
    once; --no-requeue, as troupe's nodes): Slurm's own preemption latency, the bound troupe's
    workers must not add to."""
    svc = Service("svc-base", time.time())
    svc.scale(pattern[0])
    total, out = CPUS_PER_HOST * HOSTS, []
    for r in range(rounds):
        spare = total - pattern[0] - 3 - own_workers
        fillers = fill_with_sleepers(["high"] * 3 + ["low"] * own_workers + ["spare"] * spare, r)
        wait_running(total, 60)
        up = svc.scale(max(pattern))
        out.append(round(up, 3))
        svc.scale(pattern[0])
        sh("scancel", *map(str, fillers), check=False)
        wait_gone([f"filler:{r}-{i}" for i in range(total)], 60)
    svc.stop()
    return out


def colocation(args):
    pattern = [2, 10, 4, 12, 2]
    phase = 60 * args.scale
    base = slurm_own_latency(args, pattern, own_workers=4)
    log(f"colocation: Slurm's own scale-up latency over sleep jobs: {base} s")
    work = fresh_dir(os.path.join(args.out, "colocation", "elastic"))
    data = make_data(args.out, args.bin, int(150000 * args.scale))
    epochs = 56  # outlasts the service pattern (300 s at --scale 1)
    text = job_toml(os.path.join(work, "jobs"), "train", data, epochs, 4, 1, 22)
    with open(os.path.join(work, "train.toml"), "w") as f:
        f.write(text + elastic_cluster("h1"))
    # The undisturbed reference: the same job on the local launcher, 4 workers, not paced.
    ref_file = os.path.join(work, "reference.toml")
    with open(ref_file, "w") as f:
        f.write(job_toml(os.path.join(work, "jobs"), "reference", data, epochs, 4, 1, 4, pace=0))
    subprocess.run([args.bin, "run", ref_file, "--job-id", "reference", "--quiet"], cwd=work,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    t0 = time.time()
    sampler = Sampler(t0)
    sampler.start()
    svc = Service("service", t0)
    svc.scale(pattern[0])
    runner = start_elastic(args.bin, work, os.path.join(work, "train.toml"), "train")
    submitted = time.time()
    for i, want in enumerate(pattern):
        time.sleep(max(0.0, t0 + i * phase - time.time()))
        if i:
            up = svc.scale(want)
            log(f"colocation: service -> {want} replicas" + (f" (all running after {up:.2f} s)" if up else ""))
    time.sleep(max(0.0, t0 + len(pattern) * phase - time.time()))
    pattern_end = time.time() - t0
    try:
        runner.wait(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        runner.terminate()
        runner.wait()
    svc.stop()
    t_end = time.time()
    sampler.stop.set()
    time.sleep(5)
    ref = job_record(os.path.join(work, "jobs", "reference"), "reference", t0, t0, {})
    run = {"experiment": "colocation", "mode": "elastic", "cluster_cpus": CPUS_PER_HOST * HOSTS, "t0": t0,
           "t_end": round(t_end - t0, 3), "pattern_end": round(pattern_end, 3), "pace_samples_per_s": PACE,
           "allocations": allocations(t0, t_end), "sinfo": sampler.samples, "service": svc.log,
           "service_latency": svc.latency, "slurm_own_latency": base, "reference": ref["result"],
           "jobs": [job_record(os.path.join(work, "jobs", "train"), "train", t0, submitted,
                               {"priority": "low", "workers": 4, "min_workers": 1, "max_workers": 22,
                                "epochs": epochs})]}
    return [run]


EXPERIMENTS = {"gang_vs_elastic": gang_vs_elastic, "colocation": colocation, "trace": trace,
               "trace_heavy": trace_heavy, "trace_mixed": trace_mixed, "trace_mixed_heavy": trace_mixed_heavy,
               "sync_scaling": sync_scaling}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", help="the troupe binary (release build)")
    ap.add_argument("--only", default="gang_vs_elastic,colocation,trace", help="comma-separated experiments")
    ap.add_argument("--out", default="/var/tmp/troupe-experiments")
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies job sizes and times")
    ap.add_argument("--timeout", type=float, default=1800, help="per run, seconds")
    ap.add_argument("--modes", default="gang,elastic", help="gang_vs_elastic and trace: which modes "
                    "(gang, elastic, goodput)")
    ap.add_argument("--period", type=float, default=60.0, help="goodput: seconds between reallocations "
                    "(times --scale, at least 2, unless --period-fixed)")
    ap.add_argument("--period-fixed", dest="period_scales", action="store_false")
    ap.add_argument("--restart-delay", type=float, default=0.05, help="goodput: the cost of a reallocation the "
                    "policy charges, seconds (troupe's measured membership change; Pollux's is 30)")
    ap.add_argument("--async-efficiency", default="none", choices=("none", "batch"),
                    help="goodput: an async_ps job's statistical efficiency (none: its goodput is its "
                    "throughput; batch: as one batch of workers x batch_size; goodput_policy.py)")
    ap.add_argument("--no-admission", dest="admission", action="store_false", help="elastic, goodput: start "
                    "every job at its arrival, however full the cluster (the runs before 2026-11-28's second)")
    ap.add_argument("--admission-workers", type=int, default=1, help="elastic, goodput: a job is admitted once "
                    "its control plane and this many workers fit beside the jobs in the system (each counted "
                    "with as many)")
    ap.add_argument("--pack", action="store_true", help="goodput: place each allreduce job's workers on one "
                    "host where they fit (troupe scale --host) and model its ring there (goodput_policy.py)")
    ap.add_argument("--drain", action="store_true", help="goodput with --pack: a shrink drains a chosen host "
                    "(troupe scale --host): an allreduce job's with the fewest of its workers, an async job's "
                    "with the most (drain_host)")
    ap.add_argument("--spare", action="store_true", help="goodput: the async jobs keep spare workers up to "
                    "their maximum in `spare` (as under elastic): the CPUs the policy leaves idle are used, and "
                    "any job's own worker preempts them (a scale down sends its own workers beyond the target "
                    "there)")
    ap.add_argument("--pollux-policy", default=None, help="goodput: pollux_policy.py (default: bench/goodput/)")
    ap.add_argument("--no-cluster", action="store_true", help="the cluster is up already (24 CPUs)")
    ap.add_argument("--link-rate", default="", help="tc tbf on every host's link for the run (e.g. 100mbit; "
                    "scripts/hosts.sh limit), removed at the end")
    ap.add_argument("--sync-fraction", type=float, default=0.3, help="mixed traces: the R a sync job's length "
                    "is sized with (its speedup 1 / (1/w + R); sync_scaling measures it)")
    args = ap.parse_args()
    args.modes = [m for m in args.modes.split(",") if m]
    if not args.modes or any(m not in ("gang", "elastic", "goodput") for m in args.modes):
        sys.exit(f"experiments.py: --modes takes gang, elastic and/or goodput, not '{','.join(args.modes)}'")
    if args.drain and not args.pack:
        sys.exit("experiments.py: --drain needs --pack (it drains hosts of the Slurm view --pack takes)")
    args.bin = os.path.abspath(args.bin)
    names = [n for n in args.only.split(",") if n]
    for n in names:
        if n not in EXPERIMENTS:
            sys.exit(f"experiments.py: unknown experiment '{n}' (known: {', '.join(EXPERIMENTS)})")
    if os.geteuid() != 0:
        sys.exit("experiments.py: needs root (namespaced hosts, Slurm daemons)")
    os.makedirs(args.out, exist_ok=True)
    sys.path.insert(0, HERE)
    if "goodput" in args.modes:
        import goodput_policy  # noqa: E402
        goodput_policy.load_pollux_policy(args.pollux_policy)  # fails now, not after the other modes ran
    if not args.no_cluster:
        cluster_up()
    try:
        import plots  # noqa: E402  (bench/cluster/plots.py; matplotlib)
    except ImportError as e:
        plots = None
        log(f"no plots: {e} (python3-matplotlib: scripts/install-deps.sh --bench)")
    if args.link_rate:
        sync_jobs.limit_links(args.link_rate)
    try:
        run_all(args, names, plots)
    finally:
        if args.link_rate:
            sync_jobs.limit_links("off")
        if not args.no_cluster:  # the tests' cluster has 4 CPUs per host: leave none of ours up
            subprocess.run(["bash", SLURM, "down"], check=False, capture_output=True)


def run_all(args, names, plots):
    done = []
    for n in names:
        runs = EXPERIMENTS[n](args)
        for r in runs:
            r["summary"] = plots.summarise(r) if plots and r["jobs"] else {}
            r["unfinished"] = [{"job": name, "why": why} for name, why in unfinished(r)]
            path = os.path.join(args.out, f"{r['experiment']}_{r['mode']}.json")
            with open(path, "w") as f:
                json.dump(r, f, indent=1)
            log(f"{n}/{r['mode']}: {json.dumps(r['summary'])[:400]} -> {path}")
        if plots and all(r["jobs"] for r in runs) and not any(r["unfinished"] for r in runs):
            plots.plot_runs(runs, os.path.join(args.out, "figures"))
        done += runs
    check_finished(done)


if __name__ == "__main__":
    main()
