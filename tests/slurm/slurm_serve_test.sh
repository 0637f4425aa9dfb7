#!/usr/bin/env bash
# `troupe serve` with [cluster] launcher = "slurm" on the test cluster (docs/serving.md: one Slurm
# job per replica, -c threads): 2 replicas, each a Slurm job of `threads` CPUs; answers equal
# PyTorch's; under a steady request load, one replica's Slurm job is cancelled (scancel) and the
# other replica's process SIGKILLed: no request fails, each is relaunched as a new Slurm job;
# server.json names the replicas and where Slurm placed them; the server stops cleanly and leaves no
# Slurm job.
# Usage: slurm_serve_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-serve
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
state=$work/jobs/serve/mlp
fail() {
  echo "FAIL: $*"
  for f in "$work/serve.err" "$state"/logs/replica-*.log; do [[ -f $f ]] && { echo "== $f"; tail -40 "$f"; }; done
  squeue -a 2> /dev/null
  exit 1
}
server=
trap '[[ -n $server ]] && { kill $server 2> /dev/null; wait $server 2> /dev/null; }; cancel_ours > /dev/null 2>&1; rm -rf "$work"' EXIT
/usr/bin/python3 "$here/tests/serve/make_models.py" "$work/models" > /dev/null || fail "making the models"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# 2 threads a replica: each replica's Slurm job asks for 2 CPUs (-c 2).
printf '[serve]\nreplicas = 2\nthreads = 2\nroot = "%s"\nlisten = "127.0.0.1:%s"\n' "$work/jobs" "$port" > "$work/serve.toml"
printf '[cluster]\nlauncher = "slurm"\ncontrol_partition = "high"\ncontrol_host = "h1"\n' >> "$work/serve.toml"
"$B" serve "$work/models/mlp" --config "$work/serve.toml" --quiet > "$work/serve.out" 2> "$work/serve.err" &
server=$!
for _ in $(seq 1 1200); do
  curl -sf "localhost:$port/v2/health/ready" > /dev/null && break
  kill -0 $server 2> /dev/null || fail "troupe serve exited"
  sleep 0.1
done
curl -sf "localhost:$port/v2/health/ready" > /dev/null || fail "not ready in 120 s"
/usr/bin/python3 - "$work" "$port" "$here" <<'PY' || fail "answers, or a replica's Slurm job cancelled or killed under load"
import json, os, signal, subprocess, sys, time
work, port, here = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, f"{here}/tests/serve")
from serve_lib import RowLoad, ask_row  # noqa: E402
url = f"http://127.0.0.1:{port}/v2/models/mlp/infer"
ref = json.load(open(f"{work}/models/mlp/reference.json"))
state = lambda: json.load(open(f"{work}/jobs/serve/mlp/server.json"))  # noqa: E731
def slurm_jobs():
    """The server's Slurm jobs, by replica: [(job id, CPUs, node, state)]."""
    out = subprocess.run(["squeue", "-h", "-o", "%i|%j|%C|%N|%T"], capture_output=True, text=True, check=True).stdout
    jobs = {}
    for line in out.splitlines():
        i, name, cpus, node, st = line.split("|")
        if name.startswith("troupe-serve-mlp:"):
            jobs.setdefault(name.split(":", 1)[1], []).append((int(i), int(cpus), node, st))
    return jobs
def node_addr(node):
    out = subprocess.run(["scontrol", "show", "node", "-o", node], capture_output=True, text=True, check=True).stdout
    return out.split(" NodeAddr=", 1)[1].split()[0]
def ready(n):
    s = state()
    return sum(r["state"] == "ready" for r in s["replicas"]) == n and len(s["replicas"]) == n
nodes = sorted(r["node"] for r in state()["replicas"])
assert nodes == ["replica-1-0", "replica-1-1"], f"server.json names {nodes}"
jobs = slurm_jobs()
assert sorted(jobs) == nodes and all(len(v) == 1 for v in jobs.values()), f"Slurm jobs: {jobs}"
for node, [(i, cpus, host, st)] in jobs.items():
    assert st == "RUNNING" and cpus == 2, f"{node}: Slurm job {i} {st} with {cpus} CPUs, expected RUNNING with 2"
# server.json names each replica with its process and where Slurm placed it (the node's address).
for r in state()["replicas"]:
    [(i, _, host, _)] = jobs[r["node"]]
    assert r["host"] == node_addr(host), f"server.json: {r['node']} on '{r['host']}', Slurm job {i} on {host} ({node_addr(host)})"
    assert r["pid"] > 0 and r["state"] == "ready", r
print("replicas as Slurm jobs: " + ", ".join(f"{n} job {v[0][0]} on {v[0][2]}" for n, v in sorted(jobs.items())))
for row in range(len(ref["dense"])):
    ask_row(url, ref, row)
load = RowLoad(url, ref, clients=4, pause=0.002)
time.sleep(1)
def relaunched(node, how, kill):
    """kill() ends the replica `node` under load; it comes back as a new Slurm job and is ready."""
    [(old, _, host, _)] = slurm_jobs()[node]
    restarts, before = state()["restarts"], load.done
    t0 = time.time()
    kill(old)
    end = t0 + 90
    while time.time() < end:
        s, jobs = state(), slurm_jobs()
        new = [j for j in jobs.get(node, []) if j[0] != old and j[3] == "RUNNING"]
        if s["restarts"] > restarts and ready(2) and new and all(j[0] != old for j in jobs.get(node, [])):
            break
        time.sleep(0.1)
    else:
        raise SystemExit(f"{node} ({how}) not relaunched as a new Slurm job in 90 s: {slurm_jobs()}, {state()}")
    [r] = [r for r in state()["replicas"] if r["node"] == node]
    assert r["incarnation"] >= 1 and r["host"] == node_addr(new[0][2]), f"server.json after the relaunch: {r}"
    print(f"{node} ({how}; Slurm job {old} on {host}): relaunched as Slurm job {new[0][0]} on {new[0][2]}, "
          f"ready {time.time() - t0:.1f} s later; {load.done - before} requests meanwhile, {len(load.errors)} failed")
relaunched("replica-1-1", "scancel of its Slurm job", lambda job: subprocess.run(["scancel", str(job)], check=True))
time.sleep(1)
victim = [r for r in state()["replicas"] if r["node"] == "replica-1-0"][0]
relaunched("replica-1-0", f"SIGKILL of its process {victim['pid']}", lambda job: os.kill(victim["pid"], signal.SIGKILL))
time.sleep(1)
load.stop()
assert not load.errors, load.errors[:3]
assert state()["requests_failed"] == 0, state()["requests_failed"]
print(f"{load.done} requests under load, 0 failed")
PY
kill -TERM $server
wait $server || fail "troupe serve did not stop cleanly"
server=
grep -q '"state": "stopped"' "$state/server.json" || fail "server.json does not say stopped"
for n in replica-1-0#1 replica-1-1#1; do grep -q "$n launched" "$work/serve.err" || fail "no '$n launched' in the log"; done
grep -E 'replica-1-[01]#[01] (launched|ready)' "$work/serve.err" | sed 's/^.*serve: //'
wait_for 30 no_jobs_left serve-mlp || fail "Slurm jobs left after the server stopped: $(squeue -h -o '%i %j %T')"
echo "PASS: troupe serve with 2 replicas as Slurm jobs; one scancelled and one SIGKILLed under load, each relaunched as a new Slurm job, no request failed, no Slurm job left"
