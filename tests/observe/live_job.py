"""A real `troupe run` job for the observe tests: DeepFM on synthetic CTR data with async PS, long
enough to look at while it runs. Waits are on events with deadlines, never sleep-then-assert."""
import json
import shutil
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77


def skip(why):
    """Exit 77 (ctest: skipped) with the reason; in CI (CI=true) exit 1 instead: there a skipped test
    is a failure (a machine missing a tool hides what the test checks)."""
    if os.environ.get("CI") == "true":
        print("FAILED (CI=true, where nothing may skip): " + why, flush=True)
        sys.exit(1)
    print("SKIPPED: " + why, flush=True)
    sys.exit(SKIP)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, pred, timeout=30.0, every=0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = pred()
        except (OSError, ValueError, KeyError):  # a file not there yet, a server not up yet
            last = None
        if last:
            return last
        time.sleep(every)
    raise AssertionError("timed out after %.0f s waiting for %s" % (timeout, what))


def http(url, method="GET", headers=None, timeout=5):
    req = urllib.request.Request(url, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class LiveJob:
    def __init__(self, troupe, root, name, workers=2, rows=2_000_000, epochs=5, cluster=""):
        self.troupe, self.root, self.name = troupe, root, name
        self.job_dir = os.path.join(root, "jobs", name)
        os.makedirs(root, exist_ok=True)
        cache = os.path.join(os.environ.get("TMPDIR", "/tmp"), "troupe-test-datasets")
        self.file = os.path.join(root, name + ".toml")
        with open(self.file, "w") as f:
            f.write(f"""[job]
root = "{root}/jobs"
dataset_cache = "{cache}"
name = "{name}"
strategy = "async_ps"
workers = {workers}
max_workers = 4
records_per_task = 1024
[ps]
shards = 1
checkpoint_every_ms = 500
[model]
type = "deepfm"
embedding_dim = 8
hidden = [32]
[train]
epochs = {epochs}
batch_size = 128
optimizer = "adam"
learning_rate = 0.01
[data]
source = "synthetic-ctr"
rows = {rows}
test_rows = 2000
fields = 6
vocab_per_field = 50
""" + ("[cluster]\n" + cluster + "\n" if cluster else ""))
        self.out = open(os.path.join(root, name + ".out"), "w")
        self.err = open(os.path.join(root, name + ".err"), "w")
        self.proc = subprocess.Popen([troupe, "run", self.file, "--job-id", name, "--quiet"],
                                     stdout=self.out, stderr=self.err)

    def nodes(self):
        with open(os.path.join(self.job_dir, "nodes.json")) as f:
            return json.load(f)

    def pid(self, node):
        for n in self.nodes()["nodes"]:
            if n["name"] == node and n["state"] != "exited":
                return n["pid"]
        return 0

    def events(self):
        out = []
        try:
            with open(os.path.join(self.job_dir, "events.jsonl")) as f:
                for line in f:
                    if line.endswith("\n"):
                        out.append(json.loads(line))
        except FileNotFoundError:
            pass
        return out

    def wait(self, what, pred, timeout=30.0):
        """wait_for, failing at once (with the runner's log) if the job's runner has exited."""
        def check():
            if not self.running():
                raise SystemExit("the job's runner exited (rc %s) while waiting for %s:\n%s"
                                 % (self.proc.returncode, what, self.log_tail()))
            return pred()
        return wait_for(what, check, timeout)

    def wait_event(self, what, pred, timeout=30.0):
        return self.wait(what, lambda: next((e for e in self.events() if pred(e)), None), timeout)

    def running(self):
        return self.proc.poll() is None

    def stop(self, timeout=20):
        if self.running():
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.out.close()
        self.err.close()
        return self.proc.returncode

    def log_tail(self):
        with open(os.path.join(self.root, self.name + ".err")) as f:
            return f.read()[-3000:]


def import_websocket():
    try:
        import websocket  # noqa: F401
    except ImportError:
        sys.path.append("/usr/lib/python3/dist-packages")  # Debian's python3-websocket
        try:
            import websocket  # noqa: F401
        except ImportError:
            skip("the Python module websocket is not importable by %s: install the Debian package "
                 "python3-websocket (scripts/install-deps.sh does) and run the test with /usr/bin/python3"
                 % sys.executable)
    return sys.modules["websocket"]


class Browser:
    """Headless Chromium driven over the DevTools protocol (one page)."""

    def __init__(self, work, width=1400, height=1600):
        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            skip("neither chromium nor chromium-browser is on PATH: install the Debian package chromium "
                 "(scripts/install-deps.sh does)")
        websocket = import_websocket()
        os.makedirs(work, exist_ok=True)
        profile = os.path.join(work, "chromium-profile")
        shutil.rmtree(profile, ignore_errors=True)
        self.log = open(os.path.join(work, "chromium.log"), "w")
        self.tmp = tempfile.mkdtemp(prefix="troupe-chromium-")
        self.proc = subprocess.Popen([exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      "--disable-extensions", "--remote-debugging-port=0",
                                      "--remote-allow-origins=*", "--user-data-dir=" + profile,
                                      "--window-size=%d,%d" % (width, height), "about:blank"],
                                     stdout=self.log, stderr=subprocess.STDOUT,
                                     # its singleton socket directory: a short path (a socket's path is
                                     # limited to 107 bytes), removed on close
                                     env=dict(os.environ, TMPDIR=self.tmp))
        port_file = os.path.join(profile, "DevToolsActivePort")
        port = wait_for("chromium's DevTools port", lambda: open(port_file).readline().strip(), 30)
        pages = wait_for("a chromium page", lambda: [p for p in json.loads(
            http("http://127.0.0.1:%s/json/list" % port)[1]) if p["type"] == "page"], 30)
        self.ws = websocket.create_connection(pages[0]["webSocketDebuggerUrl"], timeout=30)
        self.id = 0

    def call(self, method, **params):
        self.id += 1
        self.ws.send(json.dumps({"id": self.id, "method": method, "params": params}))
        while True:
            m = json.loads(self.ws.recv())
            if m.get("id") == self.id:
                if "error" in m:
                    raise AssertionError("%s: %s" % (method, m["error"]))
                return m.get("result", {})

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError("%s: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def screenshot(self, path):
        import base64
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self):
        try:
            self.ws.close()
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            self.log.close()
            shutil.rmtree(self.tmp, ignore_errors=True)


class Dashboard:
    """`troupe dashboard` on a free loopback port."""

    def __init__(self, troupe, root, work, extra=()):
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log = open(os.path.join(work, "dashboard.log"), "w")
        self.proc = subprocess.Popen([troupe, "dashboard", "--root", root, "--listen", "127.0.0.1:%d" % self.port,
                                      *extra], stdout=self.log, stderr=subprocess.STDOUT)
        wait_for("the dashboard to answer", lambda: http(self.url + "/LICENSE.uplot.txt")[0] == 200, 20)

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(10)
        self.log.close()
