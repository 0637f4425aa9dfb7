"""The real `troupe dashboard` process as a server of untrusted input.

1. Its command line: the jobs root defaults to `jobs` (as every other command), a root that does not
   exist is exit 2 naming it, `--listen` takes a host name with any port.
2. A fuzz run (FUZZ_SECONDS, default 20): one thread keeps rewriting random job directories under the
   root (random files, garbage and deep JSON, events with markup, links out of the root, to devices,
   to other jobs and in loops, hard links, FIFOs, linked job directories) while others send random
   requests (paths, methods, headers, bodies, raw garbage). Every request must be answered (an HTTP
   status line) within ANSWER_S, none with a 500, and no answer may hold the content of a secret
   file planted outside the root (nor /etc/passwd); the process must be alive at the end and exit 0
   on SIGTERM. The seed is printed: FUZZ_SEED=N reruns the same choices (timing aside).
Usage: dashboard_serve_test.py TROUPE_BIN WORK_DIR"""
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from live_job import free_port, http, wait_for  # noqa: E402

ANSWER_S = 15.0  # a request's bound (the machine may be loaded; the server's own read timeout is 5 s)
PASSWD = b"root:x:0:0:"


def check_cli(troupe, work):
    env = {k: v for k, v in os.environ.items() if k not in ("TROUPE_TOKEN", "TROUPE_CLUSTER_TOKEN")}
    missing = os.path.join(work, "no-such-root")
    out = subprocess.run([troupe, "dashboard", "--root", missing, "--listen", "127.0.0.1:0"], env=env,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and missing in out.stderr and "no such directory" in out.stderr, \
        (out.returncode, out.stderr)
    # The default root is ./jobs: missing here, named in the error; present, served.
    cwd = os.path.join(work, "cwd")
    os.makedirs(cwd)
    out = subprocess.run([troupe, "dashboard", "--listen", "127.0.0.1:0"], env=env, cwd=cwd,
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2 and "--root jobs:" in out.stderr, (out.returncode, out.stderr)
    os.makedirs(os.path.join(cwd, "jobs"))
    port = free_port()
    p = subprocess.Popen([troupe, "dashboard", "--listen", "localhost:%d" % port], env=env, cwd=cwd,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = p.stdout.readline()
        assert "http://127.0.0.1:%d/" % port in line and "jobs under jobs" in line, line
        status, body = http("http://127.0.0.1:%d/api/jobs" % port)
        assert status == 200 and '"root":"jobs"' in body, (status, body)
    finally:
        p.terminate()
        assert p.wait(10) == 0
    out = subprocess.run([troupe, "dashboard", "--root", cwd, "--listen", "no-such-host.invalid:80"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "no-such-host.invalid" in out.stderr, (out.returncode, out.stderr)
    print("cli: missing root, default root, localhost:%d and an unknown host: as expected" % port)


class Tree:
    """Random job directories under root; the secret lives outside it."""

    FILES = ["events.jsonl", "nodes.json", "result.json", "job.toml", "token", "slurm_jobs",
             "logs/worker-0.log", "logs/master.log", "logs/ps-0.log", "logs/runner.log"]
    IDS = ["job-a", "job-b", "job-c", "job.d", "job_e", "j" * 64, ".hidden", "bad id", "x%2fy"]

    def __init__(self, rng, root, outside, secret):
        self.rng, self.root, self.outside, self.secret = rng, root, outside, secret
        self.targets = [os.path.join(outside, "secret.txt"), outside, os.path.join(outside, "logs"),
                        os.path.join(outside, "events.jsonl"), os.path.join(outside, "nodes.json"),
                        "/dev/zero", "/dev/urandom", "/dev/null", "/etc/passwd", "/etc", "/proc/self/environ",
                        "loop", "..", "../..", "../job-a", "../job-a/events.jsonl", "nowhere"]

    def text(self):
        r = self.rng
        pick = r.randrange(12)
        if pick == 0:
            return "[" * r.choice([10, 1000, 100000]) + "]" * r.randrange(2)
        if pick == 1:
            return bytes(r.randrange(256) for _ in range(r.randrange(2000))).decode("latin-1")
        if pick == 2:
            return '{"updated_ms": "%s", "nodes": %s}' % (r.choice(["x", "1e999", "-1"]), r.choice(["7", "[1,{}]", "null"]))
        if pick == 3:
            return '{"tasks_done": "%s", "tasks_failed": [], "reason": {"a": 1}}\n' % r.choice(["1000", "<b>"])
        if pick == 4:
            return "41\n42\n; rm -rf /\n" + str(r.randrange(10 ** 30)) + "\n"
        if pick == 5:
            return "x" * r.choice([0, 1, 70000])
        lines = []
        for _ in range(r.randrange(1, 40)):
            kind = r.choice(["job_start", "metrics", "join", "died", "scale", "job_end", "node_stats", "<img>", ""])
            val = r.choice(['"<img src=x onerror=alert(1)>"', "1e308", "-5", "18446744073709551615", "true",
                            '"\\u0000\\ud800"', "[[[[[[[[1]]]]]]]]", "{}", '"%s"' % ("w" * r.randrange(300))])
            t = r.choice(["1", "1700000000000", "-3", '"x"', "18446744073709551615", "1e3"])
            lines.append('{"t_ms": %s, "kind": "%s", "node": %s, "state": %s, "strategy": %s, "workers": %s, '
                         '"tasks_done": %s, "samples": %s, "loss": %s}' % (t, kind, val, val, val, val, val, val, val))
        cut = r.randrange(3)
        out = "\n".join(lines) + ("\n" if cut else "")
        return out if cut < 2 else out + '{"t_ms": 5, "kind": "metr'

    def make_entry(self, path):
        r = self.rng
        os.makedirs(os.path.dirname(path), exist_ok=True)
        pick = r.randrange(10)
        try:
            if pick <= 4:
                with open(path, "w", encoding="latin-1") as f:
                    f.write(self.text())
            elif pick <= 6:
                os.symlink(r.choice(self.targets + [os.path.basename(path)]), path)
            elif pick == 7:
                os.mkfifo(path)
            elif pick == 8:
                os.link(os.path.join(self.outside, "secret.txt"), path)
            else:
                os.makedirs(path)
        except OSError:
            pass

    def rebuild(self, job_id):
        r = self.rng
        d = os.path.join(self.root, job_id)
        if os.path.islink(d) or os.path.isfile(d) or is_fifo(d):
            os.unlink(d)
        else:
            shutil.rmtree(d, ignore_errors=True)
        pick = r.randrange(8)
        if pick == 0:
            os.symlink(r.choice([self.outside, os.path.join(self.outside, "job"), "/", "/dev", "job-a", job_id]), d)
            return
        if pick == 1:
            os.mkfifo(d)
            return
        os.makedirs(d)
        names = r.sample(self.FILES, r.randrange(1, len(self.FILES)))
        if r.randrange(4) == 0:  # logs/ a link out of the root (nothing is written through it)
            os.symlink(os.path.join(self.outside, "logs"), os.path.join(d, "logs"))
            names = [n for n in names if not n.startswith("logs/")]
        for name in names:
            self.make_entry(os.path.join(d, name))


def is_fifo(p):
    try:
        import stat
        return stat.S_ISFIFO(os.lstat(p).st_mode)
    except OSError:
        return False


def plant_outside(outside, secret):
    os.makedirs(os.path.join(outside, "logs"))
    os.makedirs(os.path.join(outside, "job", "logs"))
    for p in ["secret.txt", "logs/worker-0.log", "logs/master.log", "job/logs/worker-0.log", "job/token"]:
        with open(os.path.join(outside, p), "w") as f:
            f.write(secret + "\n")
    for d in [outside, os.path.join(outside, "job")]:
        with open(os.path.join(d, "events.jsonl"), "w") as f:
            f.write('{"t_ms": 1700000000000, "kind": "job_start", "strategy": "%s", "workers": 2}\n' % secret)
        with open(os.path.join(d, "nodes.json"), "w") as f:
            f.write('{"updated_ms": 1, "nodes": [{"name": "%s"}]}' % secret)
        with open(os.path.join(d, "result.json"), "w") as f:
            f.write('{"tasks_done": 5, "reason": "%s"}' % secret)
        with open(os.path.join(d, "job.toml"), "w") as f:
            f.write("# %s\n" % secret)


def random_request(r, ids):
    pick = r.randrange(20)
    if pick == 0:
        return bytes(r.randrange(256) for _ in range(r.randrange(1, 300)))
    method = r.choice(["GET"] * 8 + ["POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "BREW", "G\x01T"])
    job = r.choice(ids + ["..", "%2e%2e", "", "a/b", "job-a%00", "%2fetc%2fpasswd"])
    what = r.choice(["events", "nodes", "result", "stop", "scale", "log/worker-0", "log/master", "log/ps-0",
                     "log/../../secret", "log/", "log/%2e%2e", "nothing", "", "events/x"])
    path = r.choice(["/api/jobs", "/api/cluster", "/api", "/api/", "/", "/index.html", "/uplot.min.js",
                     "/LICENSE.uplot.txt", "/../../etc/passwd", "/api/jobs/%s/%s" % (job, what),
                     "/api/jobs/%s/%s" % (job, what), "/api/jobs/%s" % job, "/api/x/" + "a" * r.randrange(3000),
                     "/%s" % "".join(r.choice("%/.a?&=#\\") for _ in range(r.randrange(40)))])
    query = r.choice(["", "?after=%d" % r.randrange(-5, 10 ** 7), "?after=99999999999999999999999",
                      "?bytes=%d" % r.choice([0, 1, 100, 10 ** 9, -1]), "?token=x", "?workers=%s" % r.choice(["3", "-1", "x"]),
                      "?a=%zz&b", "?" + "&" * 50])
    headers = ["Host: 127.0.0.1", "Connection: close"]
    for _ in range(r.randrange(4)):
        headers.append("%s: %s" % (r.choice(["X-A", "Authorization", "Cookie", "Content-Type", "Accept", "Range"]),
                                   r.choice(["Bearer x", "bytes=0-10", "a" * r.randrange(100), "\u00e9", ""])))
    if r.randrange(40) == 0:
        headers.append("X-Big: " + "b" * 10000)
    body = bytes(r.randrange(256) for _ in range(r.choice([0, 0, 10, 1000])))
    if body:
        headers.append("Content-Length: %d" % len(body))
    head = "%s %s%s HTTP/1.1\r\n%s\r\n\r\n" % (method, path, query, "\r\n".join(headers))
    return head.encode("utf-8", "replace") + body


def send(port, raw):
    """The whole answer (the server closes after it), or raises on a timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=ANSWER_S) as s:
        deadline = time.monotonic() + ANSWER_S
        try:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the server may answer (400, 431) and close before reading it all
        out = b""
        while True:
            s.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            out += chunk
        return out


def stand_in_slurm(work):
    """sinfo and sacct for /api/cluster that answer, fail or hang past the dashboard's 5 s bound (as
    they do while slurmctld restarts): no request may wait for them."""
    bin_dir = os.path.join(work, "bin")
    os.makedirs(bin_dir)
    for name, answer in (("sinfo", "h1|4"), ("sacct", "41|troupe-job:master|high|1|1000|1010|COMPLETED")):
        path = os.path.join(bin_dir, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\ncase $(od -An -N1 -tu1 /dev/urandom) in\n"
                    "  *[0-4]) exec sleep 30 ;;\n  *[5-6]) echo 'Unable to contact slurm controller' >&2; exit 1 ;;\n"
                    "  *) echo '%s' ;;\nesac\n" % answer)
        os.chmod(path, 0o755)
    return bin_dir


def fuzz(troupe, work, seconds, seed):
    root, outside = os.path.join(work, "fuzz-jobs"), os.path.join(work, "outside")
    secret = "SECRET-%016x" % random.Random(seed).getrandbits(64)
    os.makedirs(root)
    plant_outside(outside, secret)
    tree = Tree(random.Random(seed), root, outside, secret)
    for job_id in Tree.IDS:
        tree.rebuild(job_id)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("TROUPE_TOKEN", "TROUPE_CLUSTER_TOKEN")}
    env["PATH"] = stand_in_slurm(work) + ":" + env.get("PATH", "")
    log = open(os.path.join(work, "fuzz-dashboard.log"), "w")
    p = subprocess.Popen([troupe, "dashboard", "--root", root, "--listen", "127.0.0.1:%d" % port], env=env,
                         stdout=log, stderr=subprocess.STDOUT)
    wait_for("the dashboard to answer", lambda: http("http://127.0.0.1:%d/LICENSE.uplot.txt" % port)[0] == 200, 20)
    stop = threading.Event()
    failures, statuses, lock = [], {}, threading.Lock()

    def mutate():
        while not stop.is_set():
            tree.rebuild(tree.rng.choice(Tree.IDS))
            time.sleep(0.005)

    def request(n):
        r = random.Random(seed * 1000 + n)
        while not stop.is_set():
            raw = random_request(r, Tree.IDS)
            t0 = time.monotonic()
            try:
                out = send(port, raw)
            except OSError as e:
                out, err = b"", e
            else:
                err = None
            took = time.monotonic() - t0
            # Closed without an answer: only when the request ended before a request line did.
            status = out[9:12].decode("latin-1") if out.startswith(b"HTTP/1.1 ") else ("closed" if not out and not err else None)
            problem = None
            if p.poll() is not None:
                problem = "the dashboard exited (rc %s)" % p.returncode
            elif status is None or (status == "closed" and raw.startswith(b"GET /")):
                problem = "no answer after %.1f s (%s)" % (took, err)
            elif status == "500":
                problem = "500"
            elif secret.encode() in out or PASSWD in out:
                problem = "served a file outside the root"
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if problem:
                    failures.append("%s: %r -> %r" % (problem, raw[:300], out[:600]))
            if problem and p.poll() is not None:
                return

    threads = [threading.Thread(target=mutate)] + [threading.Thread(target=request, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(ANSWER_S + 5)
    alive = p.poll() is None
    total = sum(statuses.values())
    print("fuzz: seed %d, %.0f s, %d requests, answers by status: %s" % (seed, seconds, total, dict(sorted(
        statuses.items(), key=lambda kv: str(kv[0])))))
    for f in failures[:10]:
        print("FAIL", f)
    if alive:
        # Still answering after all that: a plain listing within the bound, then a clean exit.
        try:
            status, _ = http("http://127.0.0.1:%d/api/jobs" % port, timeout=ANSWER_S)
        except OSError as e:
            status = e
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(20)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = "none (killed after 20 s)"
        failures += [] if status == 200 else ["a listing after the fuzz: %s" % status]
        failures += [] if rc == 0 else ["exit %s on SIGTERM" % rc]
    log.close()
    assert alive, "the dashboard died (rc %s); its log: %s" % (p.returncode, open(log.name).read()[-2000:])
    assert not failures, "%d of %d requests failed (seed %d); the first: %s" % (
        len(failures), total, seed, failures[:3])
    assert total >= 50, "only %d requests in %.0f s" % (total, seconds)


def main():
    troupe, work = os.path.abspath(sys.argv[1]), sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check_cli(troupe, work)
    seed = int(os.environ.get("FUZZ_SEED", random.SystemRandom().randrange(1 << 30)))
    fuzz(troupe, work, float(os.environ.get("FUZZ_SECONDS", "20")), seed)
    shutil.rmtree(work, ignore_errors=True)
    print("OK")


if __name__ == "__main__":
    main()
