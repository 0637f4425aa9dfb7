#!/usr/bin/env python3
"""`troupe serve` under a fixed-rate load while replicas are SIGKILLed and the model is swapped.

  serve_chaos_test.py TROUPE WORK_DIR [kill_and_swap|hup_and_watch]

kill_and_swap  2 replicas of the mlp at RATE requests/s (default 100) for ~14 s, from an open-loop
               generator (requests go out on schedule, whether or not earlier ones were answered):
               a replica SIGKILLed; `troupe serve reload` to a newer version (mlp_v2); reloads of
               a model that cannot load and of one with other outputs, both refused while v2 keeps
               serving; a replica of the new generation SIGKILLed. Zero failed requests; every answer
               from exactly one version and equal to that version's PyTorch outputs; every request
               sent after the reload returned answered by v2; p99 during each event against p99
               outside them.
stop_a_replica a SIGSTOPped replica is fenced and replaced; a request waits for it.
hup_and_watch  SIGHUP re-reads the served directory after a job replaced it (rename into place), one sent
               while the first model loads too;
               `--watch DIR` moves to a newer job's model/ on its own, refuses an incompatible one.
cut_host       a host whose replicas cannot reach the front end is cut off; its replica goes to
               another host.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import (Server, TestFailure, check_answer, fail, infer_body, log, make_models,  # noqa: E402
                       pid_of_node, wait_for, watchdog)


def load_ref(models, name):
    with open(os.path.join(models, name, "reference.json")) as f:
        return json.load(f)


def version_of(models, name):
    with open(os.path.join(models, name, "model.json")) as f:
        m = json.load(f)
    return f"{m['job']['id']}@{m['created_unix_ms']}"


class OpenLoop:
    """Requests at a fixed rate on a pool of keep-alive sessions; records each one's send time,
    latency (from its scheduled time: no coordinated omission), status and answer."""

    def __init__(self, url, refs, rate, workers=32):
        self.url, self.refs, self.rate = url, refs, rate
        self.results = []
        self.lock = threading.Lock()
        self.stop_at = None
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.local = threading.local()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def session(self):
        if not hasattr(self.local, "s"):
            self.local.s = requests.Session()
        return self.local.s

    def one(self, scheduled, row):
        ref = next(iter(self.refs.values()))
        status, answer, err = None, None, None
        try:
            r = self.session().post(self.url, json=infer_body(ref, [row]), timeout=30)
            status = r.status_code
            answer = r.json() if status == 200 else r.text[:300]
        except Exception as e:  # noqa: BLE001
            err = repr(e)
            self.local.s = requests.Session()
        done = time.time()
        with self.lock:
            self.results.append({"t": scheduled, "latency": done - scheduled, "status": status, "row": row,
                                 "answer": answer, "error": err})

    def run(self):
        start = time.time()
        n = 0
        rng = random.Random(3)
        rows = len(next(iter(self.refs.values()))["dense"])
        while self.stop_at is None or time.time() < self.stop_at:
            scheduled = start + n / self.rate
            delay = scheduled - time.time()
            if delay > 0:
                time.sleep(delay)
            self.pool.submit(self.one, scheduled, rng.randrange(rows))
            n += 1

    def start(self):
        self.thread.start()

    def finish(self):
        self.stop_at = time.time()
        self.thread.join()
        self.pool.shutdown(wait=True)
        return self.results


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(0.99 * len(xs)))] * 1e3 if xs else float("nan")


def reload(troupe, root, name, model_dir, expect_ok=True):
    out = subprocess.run([troupe, "serve", "reload", "--root", root, "--name", name, model_dir],
                         capture_output=True, text=True, timeout=120)
    if (out.returncode == 0) != expect_ok:
        fail(f"serve reload {model_dir}: exit {out.returncode}: {out.stdout} {out.stderr}")
    return out.stdout + out.stderr


def replica_pids(srv, generation=None):
    return {r["node"]: r["pid"] for r in srv.state()["replicas"]
            if r["state"] == "ready" and r["pid"] and (generation is None or r["generation"] == generation)}


def kill_and_swap(troupe, work, models):
    rate = float(os.environ.get("RATE", "100"))
    root = os.path.join(work, "jobs")
    refs = {version_of(models, "mlp"): load_ref(models, "mlp"), version_of(models, "mlp_v2"): load_ref(models, "mlp_v2")}
    v1, v2 = version_of(models, "mlp"), version_of(models, "mlp_v2")
    srv = Server(troupe, os.path.join(models, "mlp"), root, "mlp", "--replicas", "2", "--max-batch", "16")
    events = []
    try:
        srv.wait_ready()
        gen = OpenLoop(srv.infer_url(), {v1: refs[v1]}, rate)
        gen.start()
        time.sleep(2)
        victim, pid = sorted(replica_pids(srv, 1).items())[0]
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        log(f"SIGKILLed {victim} (pid {pid})")
        wait_for(lambda: len(replica_pids(srv, 1)) == 2 and victim in replica_pids(srv, 1)
                 and replica_pids(srv, 1)[victim] != pid, "the killed replica's replacement")
        events.append(("kill", t0, time.time()))
        time.sleep(1.5)
        t0 = time.time()
        said = reload(troupe, root, "mlp", os.path.join(models, "mlp_v2"))
        swapped_at = time.time()
        events.append(("swap", t0, swapped_at))
        if f"now serves version {v2}" not in said:
            fail(f"reload said: {said}")
        # server.json (troupe serve status, jobs prune's model_path) names it as soon as the reload
        # says so: it read the old version for up to a second.
        if srv.state()["model"]["version"] != v2:
            fail(f"server.json after the reload: {srv.state()['model']}")
        log(f"reload to v2 took {swapped_at - t0:.2f} s: {said.strip()}")
        # Generation 2 serves a copy of mlp_v2 (a hard link shared the job's file, so a model.pt
        # overwritten in place changed it); generation 1's snapshot goes once it has drained.
        snaps = os.path.join(root, "serve", "mlp", "models")
        if os.stat(os.path.join(snaps, "2", "model.pt")).st_ino == os.stat(os.path.join(models, "mlp_v2", "model.pt")).st_ino:
            fail("the snapshot of mlp_v2 is a hard link to its model.pt")
        wait_for(lambda: not os.path.exists(os.path.join(snaps, "1")), "generation 1's snapshot to be removed", 60)
        time.sleep(1)
        said = reload(troupe, root, "mlp", os.path.join(models, "broken"), expect_ok=False)
        if "not a TorchScript archive" not in said:
            fail(f"reload of a broken model: {said}")
        said = reload(troupe, root, "mlp", os.path.join(models, "wide"), expect_ok=False)
        if "the served model gives 5 logits a row, the new one gives 7 logits a row" not in said:
            fail(f"reload of an incompatible model: {said}")
        # v2's model.json over another model.pt (one copied over it): the same version, another model.
        # It served under v2's name, answers claiming v2 (a user's adversarial pass found it).
        forged = os.path.join(work, "forged_v2")
        shutil.rmtree(forged, ignore_errors=True)  # an earlier run's
        shutil.copytree(os.path.join(models, "mlp_v2"), forged)
        shutil.copyfile(os.path.join(models, "mlp", "model.pt"), os.path.join(forged, "model.pt"))
        said = reload(troupe, root, "mlp", forged, expect_ok=False)
        if f"names version {v2}, the one serving, but its model.pt is another" not in said:
            fail(f"reload of v2's model.json over another model.pt: {said}")
        said = reload(troupe, root, "mlp", os.path.join(models, "nowhere"), expect_ok=False)
        if "nowhere: no such directory" not in said:  # said by the client, before the server is asked
            fail(f"reload of a missing directory: {said}")
        meta = requests.get(f"{srv.url}/v2/models/mlp", timeout=5).json()
        if meta["versions"] != [v2] or meta["troupe"]["swap"]["state"] != "refused":
            fail(f"metadata after the refusals: {meta}")
        log("refused: a model.pt that is not TorchScript, a model with 7 classes, v2's model.json over another "
            "model.pt; a missing directory by the client; v2 serves")
        time.sleep(1)
        victim, pid = sorted(replica_pids(srv, 2).items())[-1]
        t0 = time.time()
        os.kill(pid, signal.SIGKILL)
        log(f"SIGKILLed {victim} (pid {pid}) of the new generation")
        wait_for(lambda: len(replica_pids(srv, 2)) == 2 and replica_pids(srv, 2).get(victim) not in (None, pid),
                 "the new generation's replacement")
        events.append(("kill2", t0, time.time()))
        time.sleep(1.5)
        results = gen.finish()
        metrics = requests.get(srv.url + "/metrics", timeout=5).text
    finally:
        srv.stop()
    failed = [r for r in results if r["status"] != 200]
    if failed:
        fail(f"{len(failed)} of {len(results)} requests failed: {failed[:3]}")
    versions = {}
    for r in results:
        v = r["answer"]["model_version"]
        versions[v] = versions.get(v, 0) + 1
        if v not in refs:
            fail(f"an answer from version {v}")
        if problems := check_answer(r["answer"], refs[v], [r["row"]]):
            fail(f"an answer of {v} is not {v}'s: {problems}")
        if r["t"] > swapped_at and v != v2:
            fail(f"a request sent {r['t'] - swapped_at:.3f} s after the swap returned was answered by {v}")
        if r["t"] < events[1][1] and v != v1:
            fail(f"a request sent before the reload was answered by {v}")
    lat = [r["latency"] for r in results]
    inside = lambda r, e: e[1] <= r["t"] <= e[2] + 0.5  # noqa: E731
    outside = [r["latency"] for r in results if not any(inside(r, e) for e in events)]
    lines = [f"{len(results)} requests at {rate:.0f}/s, 0 failed, versions {versions}; p99 outside events "
             f"{p99(outside):.1f} ms (all: {p99(lat):.1f} ms)"]
    for name, a, b in events:
        during = [r["latency"] for r in results if inside(r, (name, a, b))]
        lines.append(f"  {name}: {b - a:.2f} s, {len(during)} requests, p99 {p99(during):.1f} ms")
    log("\n".join(lines))
    for series, least in (('troupe_serve_replica_restarts_total{model="mlp"}', 2),
                          ('troupe_serve_swaps_total{model="mlp",result="done"}', 1),
                          # a broken model.pt, one with other outputs (a missing directory is refused
                          # by the client, before the server is asked)
                          ('troupe_serve_swaps_total{model="mlp",result="refused"}', 2)):
        line = [ln for ln in metrics.splitlines() if ln.startswith(series + " ")]
        if not line or float(line[0].split()[-1]) < least:
            fail(f"/metrics: {series} {line}, expected >= {least}")


def stop_a_replica(troupe, work, models):
    """A SIGSTOPped replica (its heartbeats stop, its process lives on) is fenced and replaced; with one
    replica, a request sent meanwhile waits for the replacement and is answered. (Before 2026-11-30 the
    stopped process was left alone: 504s until it was continued by hand.)"""
    root = os.path.join(work, "jobs")
    ref = load_ref(models, "mlp")
    srv = Server(troupe, os.path.join(models, "mlp"), root, "mlp", "--replicas", "1",
                 "--set", "serve.request_timeout_ms=60000")
    try:
        srv.wait_ready()
        victim, pid = next(iter(replica_pids(srv).items()))
        os.kill(pid, signal.SIGSTOP)
        t0 = time.time()
        log(f"SIGSTOPped {victim} (pid {pid})")
        with ThreadPoolExecutor(1) as ex:
            pending = ex.submit(lambda: requests.post(srv.infer_url(), json=infer_body(ref, [0]), timeout=90))
            wait_for(lambda: replica_pids(srv).get(victim) not in (None, pid), "the stopped replica's replacement", 90)
            answer = pending.result()
        log(f"replaced {time.time() - t0:.1f} s after the SIGSTOP")
        if answer.status_code != 200:
            fail(f"the request sent while the only replica was stopped: {answer.status_code} {answer.text}")
        if problems := check_answer(answer.json(), ref, [0]):
            fail(f"its answer: {problems}")
        wait_for(lambda: not os.path.exists(f"/proc/{pid}"), "the stopped replica's process to be gone", 30)
        # The one cause, and the exit saying who killed it (it read "killed by SIGKILL: <its ready line>").
        out = srv.output()
        if f"serve: {victim}#0: heartbeat timeout" not in out or ": fenced" not in out:
            fail("the front end did not say it fenced the silent replica for its heartbeats")
        if "killed by SIGKILL (fenced by the server: heartbeat timeout" not in out:
            fail("the fenced replica's exit does not say the server fenced it")
    finally:
        srv.stop()


def slow_rows(troupe, work, models):
    """A forward slow for some rows (~4 s, past the 1 s heartbeat timeout) after fast ones: the replica
    computing it on its io thread is fenced, and the batch sent again (`retried`) is computed off the
    next replica's io thread: answered. (Before 2026-12-03 each replica it went to was fenced in turn
    and the client got 503 "sent to 3 replicas, none answered".)"""
    root = os.path.join(work, "jobs")
    srv = Server(troupe, os.path.join(models, "slow_on_big"), root, "slowrows", "--replicas", "2",
                 "--set", "serve.replica_timeout_ms=60000", "--set", "serve.request_timeout_ms=120000",
                 "--set", "transport.heartbeat_ms=250", "--set", "transport.heartbeat_timeout_ms=1000")
    body = lambda first: {"id": "t", "inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 12],
                                                 "data": [[first] + [0.5] * 11]}]}
    try:
        srv.wait_ready()
        for _ in range(5):  # fast forwards: the replicas compute on their io threads
            r = requests.post(srv.infer_url(), json=body(1.0), timeout=30)
            if r.status_code != 200:
                fail(f"a fast row: {r.status_code} {r.text}")
        t0 = time.time()
        r = requests.post(srv.infer_url(), json=body(1000.0), timeout=110)
        log(f"the slow row answered {r.status_code} in {time.time() - t0:.1f} s")
        if r.status_code != 200:
            fail(f"the slow row: {r.status_code} {r.text}")
        fenced = [line for line in srv.output().splitlines() if "heartbeat timeout: silent" in line and ": fenced" in line]
        log(f"fenced: {fenced}")
        if len(fenced) > 1:
            fail(f"{len(fenced)} replicas fenced for one slow forward")
    finally:
        srv.stop()


def kill_while_loading(troupe, work, models):
    """A replica of the new generation SIGKILLed while it loads is launched again and the swap goes
    through (one such death refused the swap until 2026-12-01, and under --watch that model for good)."""
    root = os.path.join(work, "jobs")
    v2 = version_of(models, "mlp_v2")
    # Many warm-up forwards (~2 s of them): the new replica loads long enough to be caught at it.
    srv = Server(troupe, os.path.join(models, "mlp"), root, "kl", "--replicas", "1", "--set", "serve.warmup=30000")
    try:
        srv.wait_ready()
        said = {}
        t = threading.Thread(target=lambda: said.update(out=reload(troupe, root, "kl", os.path.join(models, "mlp_v2"))))
        t.start()
        pid = wait_for(lambda: pid_of_node("replica-2-0#0", root), "the new generation's replica to start", 60)
        os.kill(pid, signal.SIGKILL)
        log(f"SIGKILLed replica-2-0#0 (pid {pid}) while it loaded")
        t.join(180)
        if "out" not in said:
            fail("the reload did not return")
        if requests.get(f"{srv.url}/v2/models/kl", timeout=5).json()["versions"] != [v2]:
            fail(f"after the reload: {said['out']}")
        if "while it loaded the new model; relaunching it as #1" not in srv.output():
            fail("the replica killed while it loaded was not launched again (or not said so)")
        log(f"the swap went through: {said['out'].strip()}")
    finally:
        srv.stop()


def local_address():
    """An address of this machine off loopback (a UDP socket's own once "connected": nothing is sent),
    for [cluster] advertise: the replicas of [cluster] hosts dial the front end there."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("198.51.100.1", 9))
        return s.getsockname()[0]


def cut_host(troupe, work, models):
    """A host whose replicas cannot reach the front end (a partition: here host `cut`, whose command
    sends the replica's --connect to a closed port) is cut off: its replica ends before it reaches the
    front end (exit 69, as a job's node that cannot join), is launched again on another host with a
    free slot, and the server starts (it failed to start, its first replica's death refusing the
    model, before 2026-12-02)."""
    root = os.path.join(work, "jobs")
    ref = load_ref(models, "mlp")
    wrap = os.path.join(work, "host.sh")
    with open(wrap, "w") as f:
        f.write('#!/bin/sh\n# host.sh HOST COMMAND...: runs COMMAND here; on host "cut" its --connect leads nowhere.\n'
                'host=$1; shift\nif [ "$host" = cut ]; then\n'
                '  n=$#; prev=\n  for a in "$@"; do\n'
                '    if [ "$prev" = --connect ]; then a=127.0.0.1:1; fi\n'
                '    prev=$a; set -- "$@" "$a"\n  done\n  shift "$n"\nfi\nexec "$@"\n')
    os.chmod(wrap, 0o755)
    config = os.path.join(work, "cut.toml")
    with open(config, "w") as f:
        f.write(f'[serve]\nreplicas = 2\n[cluster]\nhosts = ["cut:1", "h2:2"]\nhost_command = "{wrap} {{host}}"\n'
                f'advertise = "{local_address()}"\n')
    srv = Server(troupe, os.path.join(models, "mlp"), root, "cut", "--config", config)
    try:
        srv.wait_ready(90)
        wait_for(lambda: sorted((r["host"], r["state"]) for r in srv.state()["replicas"]) ==
                 [("h2", "ready"), ("h2", "ready")], "both replicas ready on h2", 60)
        out = srv.output()
        if "serve: host cut: replica-1-0#0 ended before it reached the front end" not in out:
            fail(f"the cut host was not said: {out[-1500:]}")
        if not re.search(r"replica-1-0#1 launched \(pid \d+ on host h2\)", out):
            fail(f"the cut host's replica was not launched again on h2: {out[-1500:]}")
        answer = requests.post(srv.infer_url(), json=infer_body(ref, [0, 1]), timeout=30)
        if answer.status_code != 200 or (problems := check_answer(answer.json(), ref, [0, 1])):
            fail(f"the answer after the cut: {answer.status_code} {answer.text[:300]}")
        log("a replica on a cut-off host relaunched on h2; both ready there; answers right")
    finally:
        srv.stop()


def hup_while_starting(troupe, root, models, v2):
    """A SIGHUP while the first model loads (many warm-up forwards: seconds) is taken once it serves:
    the directory, replaced meanwhile, is read again (the start's wait for SIGTERM dropped it)."""
    served = os.path.join(root, "served-at-start")
    shutil.rmtree(served, ignore_errors=True)
    shutil.copytree(os.path.join(models, "mlp"), served)
    srv = Server(troupe, served, root, "hup-start", "--set", "serve.warmup=30000")
    try:
        state = os.path.join(root, "serve", "hup-start", "server.json")

        def own_state():  # its own server.json: its signal handlers are in place
            try:
                with open(state) as f:
                    return json.load(f).get("pid") == srv.proc.pid
            except (OSError, ValueError):
                return False

        wait_for(own_state, "the starting server's own server.json", 60)
        tmp = served + ".tmp-x"
        shutil.copytree(os.path.join(models, "mlp_v2"), tmp)
        shutil.rmtree(served)
        os.rename(tmp, served)
        srv.proc.send_signal(signal.SIGHUP)
        srv.wait_ready()
        wait_for(lambda: requests.get(f"{srv.url}/v2/models/hup-start", timeout=5).json()["versions"] == [v2],
                 "the SIGHUP sent while it started to move to the directory's new model", 120)
        log("a SIGHUP while the first model loaded: taken once it served")
    finally:
        srv.stop()


def hup_and_watch(troupe, work, models):
    root = os.path.join(work, "jobs")
    v1, v2 = version_of(models, "mlp"), version_of(models, "mlp_v2")
    hup_while_starting(troupe, root, models, v2)
    served = os.path.join(work, "served")
    shutil.rmtree(served, ignore_errors=True)
    shutil.copytree(os.path.join(models, "mlp"), served)
    srv = Server(troupe, served, root, "hup")
    try:
        srv.wait_ready()
        # A job writes its model next to its place and renames it there.
        tmp = served + ".tmp-x"
        shutil.copytree(os.path.join(models, "mlp_v2"), tmp)
        shutil.rmtree(served)
        os.rename(tmp, served)
        srv.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: requests.get(f"{srv.url}/v2/models/hup", timeout=5).json()["versions"] == [v2],
                 "SIGHUP to move to the directory's new model")
        r = requests.post(srv.infer_url(), json=infer_body(load_ref(models, "mlp_v2"), [3]), timeout=5).json()
        if r["model_version"] != v2 or check_answer(r, load_ref(models, "mlp_v2"), [3]):
            fail(f"after SIGHUP: {r}")
        log("SIGHUP: the replaced directory's model serves")
        # After a reload to another directory, a reload without one and SIGHUP read that one again
        # (before 2026-11-30 both went back to the directory the server was started with).
        other = os.path.join(work, "other")
        shutil.rmtree(other, ignore_errors=True)
        shutil.copytree(os.path.join(models, "mlp"), other)
        reload(troupe, root, "hup", other)
        versions = lambda: requests.get(f"{srv.url}/v2/models/hup", timeout=5).json()["versions"]  # noqa: E731
        if versions() != [v1]:
            fail(f"after a reload to {other}: versions {versions()}")
        out = subprocess.run([troupe, "serve", "reload", "--root", root, "--name", "hup"], capture_output=True,
                             text=True, timeout=120)
        if out.returncode != 0 or versions() != [v1]:
            fail(f"a reload without a directory: exit {out.returncode} {out.stdout} {out.stderr}; "
                 f"versions {versions()}, expected [{v1}] (the last reload's directory)")
        missing = subprocess.run([troupe, "serve", "reload", "--root", root, "--name", "hup", "/nonexistent/model"],
                                 capture_output=True, text=True, timeout=60)
        if missing.returncode != 2 or "/nonexistent/model: no such directory" not in missing.stderr:
            fail(f"a reload of a missing directory: exit {missing.returncode} {missing.stderr}")
        srv.proc.send_signal(signal.SIGHUP)
        time.sleep(1.5)
        if versions() != [v1]:
            fail(f"SIGHUP after a reload: versions {versions()}, expected [{v1}]")
        log("a reload without a directory and SIGHUP read the last reload's directory again")
        # Two replica logs a generation: only the last three generations' are kept (they piled up
        # for good, two files a swap, under --watch).
        logs = os.path.join(root, "serve", "hup", "logs")
        wait_for(lambda: len({int(f.split("-")[1]) for f in os.listdir(logs) if f.startswith("replica-")}) <= 3,
                 "the replica logs of older generations to go")
        gens = sorted({int(f.split("-")[1]) for f in os.listdir(logs) if f.startswith("replica-")})
        if len(gens) > 3 or not gens or gens[-1] < 4:
            fail(f"replica logs of generations {gens} in {logs}: the last three of at least four expected")
        log(f"replica logs kept for generations {gens} only")
        kept = sorted(f for f in os.listdir(logs) if f.startswith("replica-"))
    finally:
        srv.stop()
    # A new server of the same name: the earlier run's logs go to logs/previous/ (its generations
    # start at 1 again, and it appended to the old replica-1-*.log).
    srv = Server(troupe, served, root, "hup")
    try:
        srv.wait_ready()
        now = sorted(f for f in os.listdir(logs) if f.startswith("replica-"))
        before = sorted(os.listdir(os.path.join(logs, "previous")))
        if not now or any(not f.startswith("replica-1-") for f in now) or before != kept:
            fail(f"after a restart: logs {now}, previous {before}; the earlier run left {kept}")
        log("a restarted server's replica logs start anew; the earlier run's are in logs/previous/")
    finally:
        srv.stop()
    # --config: the file's relative model path is relative to the file (run from another directory).
    cfg = os.path.join(work, "cfg")
    os.makedirs(cfg, exist_ok=True)
    with open(os.path.join(cfg, "serve.toml"), "w") as f:
        f.write('[serve]\nmodel = "../other"\n')
    srv = Server(troupe, None, root, "cfg", "--config", os.path.join(cfg, "serve.toml"), cwd="/")
    try:
        srv.wait_ready()
        if requests.get(f"{srv.url}/v2/models/cfg", timeout=5).json()["versions"] != [v1]:
            fail("--config's model = \"../other\" did not serve the model beside the file")
        log("--config: a relative model path is the file's")
    finally:
        srv.stop()
    watched = os.path.join(work, "watched")
    shutil.rmtree(watched, ignore_errors=True)
    os.makedirs(watched)
    shutil.copytree(os.path.join(models, "mlp"), os.path.join(watched, "job-a", "model"))
    srv = Server(troupe, os.path.join(watched, "job-a", "model"), root, "watch", "--set", "serve.watch_interval_ms=200",
                 "--watch", watched)
    try:
        srv.wait_ready()
        # The stopped "hup" server left its directory: a reload without --name finds the one running.
        out = subprocess.run([troupe, "serve", "reload", "--root", root], capture_output=True, text=True,
                             timeout=120)
        if out.returncode != 0 or "watch now serves" not in out.stdout:
            fail(f"serve reload without --name beside a stopped server: exit {out.returncode} {out.stdout} "
                 f"{out.stderr}")
        # An incompatible newer model is skipped; a compatible one is taken.
        shutil.copytree(os.path.join(models, "wide"), os.path.join(watched, "job-w", "model"))
        time.sleep(1)
        if requests.get(f"{srv.url}/v2/models/watch", timeout=5).json()["versions"] != [v1]:
            fail("--watch took a model with other outputs")
        passed = "--watch passes over " + os.path.join(watched, "job-w", "model") + ": the served model"
        wait_for(lambda: passed in srv.output(), "--watch to say why it passes over a model with other outputs")
        # SIGHUP with nothing newer says so (it left no trace).
        srv.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "SIGHUP: no model under " + watched in srv.output(), "SIGHUP to say nothing was newer")
        # A newer model another user owns (a root other users write in) is passed over: one dropped
        # there with a far-future created_unix_ms was served, and no later model replaced it.
        theirs = os.path.join(watched, "job-z")
        shutil.copytree(os.path.join(models, "mlp_v2"), os.path.join(theirs, "model"))
        meta_path = os.path.join(theirs, "model", "model.json")
        with open(meta_path) as f:
            meta = json.load(f)
        meta["created_unix_ms"] = 4102444800000  # 2100: newer than anything of this user's
        with open(meta_path, "w") as f:
            json.dump(meta, f)
        for d, _, files in os.walk(theirs):
            os.chown(d, 65534, 65534)
            for f in files:
                os.chown(os.path.join(d, f), 65534, 65534)
        time.sleep(1)
        if requests.get(f"{srv.url}/v2/models/watch", timeout=5).json()["versions"] != [v1]:
            fail("--watch took a model directory another user owns")
        shutil.copytree(os.path.join(models, "mlp_v2"), os.path.join(watched, "job-b", "model"))
        t0 = time.time()
        wait_for(lambda: requests.get(f"{srv.url}/v2/models/watch", timeout=5).json()["versions"] == [v2],
                 "--watch to move to the newer job's model")
        log(f"--watch: job-b's model serves {time.time() - t0:.2f} s after it appeared; job-w's (7 classes) skipped")
        # A newer model whose model.pt is still being copied (cp, not a rename) is refused, then taken
        # once the copy ends (it was never taken again: the deployment was lost).
        copying = os.path.join(watched, "job-c", "model")
        os.makedirs(copying)
        with open(os.path.join(models, "mlp", "model.json")) as f:
            meta = json.load(f)
        meta["job"]["id"] = "copied-c"
        meta["created_unix_ms"] = int(time.time() * 1000) + 60000
        pt = open(os.path.join(models, "mlp", "model.pt"), "rb").read()
        with open(os.path.join(copying, "model.pt"), "wb") as f:
            f.write(pt[:len(pt) // 3])
        with open(os.path.join(copying, "model.json"), "w") as f:
            json.dump(meta, f)
        v3 = f"copied-c@{meta['created_unix_ms']}"
        wait_for(lambda: f"({v3}) refused" in srv.output(), "--watch to refuse the half-copied model")
        with open(os.path.join(copying, "model.pt"), "wb") as f:
            f.write(pt)
        wait_for(lambda: requests.get(f"{srv.url}/v2/models/watch", timeout=5).json()["versions"] == [v3],
                 "--watch to take the model once its copy ended")
        log("--watch: a model refused while its model.pt was half copied is taken once the copy ends")
        shutil.rmtree(os.path.dirname(copying))  # job-w's stays the newest of this user's for watch0
    finally:
        srv.stop()
    # --watch without a model starts on the newest of this user's own (job-w's), not job-z's (another user's,
    # "created" in 2100: it was served, and --watch never moved off it).
    srv = Server(troupe, None, root, "watch0", "--watch", watched)
    try:
        srv.wait_ready()
        got = requests.get(f"{srv.url}/v2/models/watch0", timeout=5).json()["versions"]
        newest = version_of(models, "wide")  # job-w's: the newest of this user's (created after mlp_v2)
        if got != [newest]:
            fail(f"--watch without a model serves {got}, expected job-w's [{newest}]")
        log("--watch without a model: the newest of this user's own")
    finally:
        srv.stop()


def main():
    watchdog(285)  # ctest's TIMEOUT is 300 s (tests/serve/CMakeLists.txt)
    troupe, work = sys.argv[1], sys.argv[2]
    which = sys.argv[3:] or ["kill_and_swap", "stop_a_replica", "hup_and_watch", "kill_while_loading"]
    os.makedirs(work, exist_ok=True)
    models = make_models(os.path.join(work, "models"))
    try:
        for w in which:
            globals()[w](troupe, work, models)
    except TestFailure:
        sys.exit(1)
    log("ok")


if __name__ == "__main__":
    main()
