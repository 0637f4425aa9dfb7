#!/usr/bin/python3
"""Silent connections against a running job's nodes and against `troupe serve` (docs/benchmarks.md,
"A flood of silent connections"; docs/wire_format.md). Loopback only.

  fd_flood.py job TROUPE_BIN WORKDIR    the Fashion-MNIST MLP (2 workers, 3 epochs of 30,000 rows paced
                                        at 1,000 samples/s) under a soft open-file limit of 1024; from
                                        5 s to the job's end ~1,500 silent connections held open to the
                                        master's and the PS shard's transport ports (never a handshake:
                                        no token is needed). Prints the descriptors each holds every 3 s,
                                        the "Too many open files" lines in the job's logs and the result.
  fd_flood.py serve TROUPE_BIN WORKDIR MODEL_DIR
                                        `troupe serve MODEL_DIR` under a soft and hard limit of 1024;
                                        1,100 idle connections; the server's descriptors and CPU over 3 s,
                                        what the last 76 connections got, what a new client gets, and
                                        that an inference is answered once they close.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

JOB = """[model]
type = "mlp"
hidden = [256, 128]
[train]
epochs = 3
batch_size = 64
optimizer = "adam"
learning_rate = 0.001
max_samples_per_s = 1000
[data]
source = "fashion-mnist"
dir = "/usr/share/datasets/fashion-mnist"
max_train_rows = 30000
max_test_rows = 2000
[job]
workers = 2
"""


def nfds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return "gone"


def listening(pid):
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    return [ln.split()[3] for ln in out.splitlines() if f"pid={pid}," in ln]


def flood(addr, stop, stats, hold=1500):
    host, port = addr.rsplit(":", 1)
    held = []
    while not stop.is_set():
        try:
            held.append(socket.create_connection((host, int(port)), timeout=0.5))
            stats["opened"] += 1
            if len(held) > hold:
                held.pop(0).close()
        except OSError:
            stats["failed"] += 1
            time.sleep(0.005)
    for s in held:
        s.close()


def job(troupe, work):
    os.makedirs(work, exist_ok=True)
    with open(os.path.join(work, "job.toml"), "w") as f:
        f.write(JOB)
    job_id = "flood-%d" % os.getpid()
    out = os.path.join(work, job_id + ".out")
    run = subprocess.Popen(["bash", "-c", f'ulimit -Sn 1024; exec "{troupe}" run job.toml --job-id {job_id} --quiet'],
                           cwd=work, stdout=open(out, "w"), stderr=subprocess.DEVNULL)
    t0, nodes = time.time(), None
    job_dir = os.path.join(work, "jobs", job_id)
    while time.time() - t0 < 60:
        try:
            nodes = json.load(open(os.path.join(job_dir, "nodes.json")))
            if len(nodes["nodes"]) >= 4 and all(n["pid"] for n in nodes["nodes"]):
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.3)
    time.sleep(max(0, 5 - (time.time() - t0)))
    targets = {n["name"]: n["pid"] for n in nodes["nodes"] if n["role"] in ("master", "ps")}
    stop, stats, threads = threading.Event(), {"opened": 0, "failed": 0}, []
    for name, pid in targets.items():
        for addr in listening(pid):
            if addr != nodes.get("metrics_address"):
                threads.append(threading.Thread(target=flood, args=(addr, stop, stats), daemon=True))
    for t in threads:
        t.start()
    while run.poll() is None and time.time() - t0 < 300:
        time.sleep(3)
        print(json.dumps({"t": round(time.time() - t0), "fds": {n: nfds(p) for n, p in targets.items()}, **stats}),
              flush=True)
    if run.poll() is None:
        run.send_signal(signal.SIGINT)
        run.wait(30)
    stop.set()
    emfile = {}
    for log in sorted(os.listdir(os.path.join(job_dir, "logs"))):
        with open(os.path.join(job_dir, "logs", log), errors="replace") as f:
            emfile[log] = f.read().count("Too many open files")
    res = json.load(open(out))
    print(json.dumps({"bench": "fd_flood_job", "rc": run.returncode, "emfile_lines": emfile,
                      **{k: res.get(k) for k in ("status", "records_done", "wall_seconds", "test_accuracy")}}))


def serve(troupe, work, model):
    os.makedirs(work, exist_ok=True)
    srv = subprocess.Popen(["bash", "-c", f'ulimit -Sn 1024; ulimit -Hn 1024; exec "{troupe}" serve "{model}" '
                            f'--name flood --root "{work}" --listen 127.0.0.1:0'],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = None
    for line in srv.stdout:
        if "serving flood at http://" in line:
            url = line.split("http://")[1].split("/")[0]
            break
    host, port = url.rsplit(":", 1)
    threading.Thread(target=lambda: [None for _ in srv.stdout], daemon=True).start()

    def cpu():
        f = open(f"/proc/{srv.pid}/stat").read().split(")")[1].split()
        return int(f[11]) + int(f[12])

    socks = []
    for _ in range(1100):
        try:
            socks.append(socket.create_connection((host, int(port)), timeout=2))
        except OSError:
            break
    fds = nfds(srv.pid)
    c0, t0 = cpu(), time.time()
    time.sleep(3)
    busy = 100.0 * (cpu() - c0) / os.sysconf("SC_CLK_TCK") / (time.time() - t0)
    got = {}
    for s in socks[-76:]:
        s.settimeout(0.1)
        try:
            d = s.recv(200)
            k = d.split(b"\r\n", 1)[0].decode() if d else "closed, no answer"
        except socket.timeout:
            k = "no answer yet"
        got[k] = got.get(k, 0) + 1
    new = "?"
    try:
        s = socket.create_connection((host, int(port)), timeout=2)
        s.sendall(b"GET /v2/health/ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        s.settimeout(10)
        d = s.recv(200)
        new = d.split(b"\r\n", 1)[0].decode() if d else "closed"
    except OSError as e:
        new = repr(e)
    for s in socks:
        s.close()
    time.sleep(1)
    ready = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", f"http://{url}/v2/health/ready"],
                           capture_output=True, text=True).stdout
    srv.send_signal(signal.SIGTERM)
    srv.wait(30)
    print(json.dumps({"bench": "fd_flood_serve", "connections": len(socks), "server_fds": fds,
                      "cpu_percent_3s": round(busy), "last_76": got, "new_client": new, "ready_after": ready}))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "job":
        job(os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]))
    elif len(sys.argv) >= 5 and sys.argv[1] == "serve":
        serve(os.path.abspath(sys.argv[2]), os.path.abspath(sys.argv[3]), os.path.abspath(sys.argv[4]))
    else:
        sys.exit(__doc__)
