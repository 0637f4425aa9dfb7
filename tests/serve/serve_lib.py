"""Helpers of the serving tests: start the real `troupe serve` on loopback, wait for it, query it,
stop it. Standard library plus `requests` (a real client library, Debian's python3-requests)."""
import json
import struct
import os
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_models(out, bench=False):
    """The test models (make_models.py), made once per work directory."""
    if not os.path.exists(os.path.join(out, "deepfm", "reference.json")):
        args = ["/usr/bin/python3", os.path.join(HERE, "make_models.py"), out] + (["--bench"] if bench else [])
        subprocess.run(args, check=True)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`troupe serve MODEL_DIR` with its state under ROOT/serve/NAME."""

    def __init__(self, troupe, model_dir, root, name, *flags, env=None, cwd=None):
        """model_dir None: none on the command line (--config names it); cwd: where it runs."""
        self.troupe, self.root, self.name = troupe, root, name
        self.model_dir, self.flags, self.env, self.cwd = model_dir, flags, env, cwd
        os.makedirs(root, exist_ok=True)
        self.port_retries = 3
        self.launch()

    def launch(self):
        """Starts the server on a free port. free_port() only finds one that was free: another
        process (a parallel test) may take it before the server binds it; wait_ready then starts it
        again on another (at most port_retries times)."""
        self.port = free_port()
        self.log_path = os.path.join(self.root, f"serve-{self.name}-{self.port}.log")
        self.log = open(self.log_path, "w")
        args = [self.troupe, "serve", *([self.model_dir] if self.model_dir else []), "--name", self.name,
                "--root", self.root, "--listen", f"127.0.0.1:{self.port}", *self.flags]
        log("starting " + " ".join(args))
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **(self.env or {})), cwd=self.cwd)
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout=60):
        import requests
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                out = self.output()
                if f"127.0.0.1:{self.port}: Address already in use" in out and self.port_retries > 0:
                    self.port_retries -= 1
                    log(f"port {self.port} was taken before troupe serve bound it; again on another")
                    self.log.close()
                    self.launch()
                    continue
                raise RuntimeError(f"troupe serve exited {self.proc.returncode}:\n{out}")
            try:
                if requests.get(self.url + "/v2/health/ready", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"troupe serve not ready in {timeout} s:\n{self.output()}")

    def state(self):
        with open(os.path.join(self.root, "serve", self.name, "server.json")) as f:
            return json.load(f)

    def output(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def infer_url(self):
        return f"{self.url}/v2/models/{self.name}/infer"

    def stop(self, expect_code=0):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                raise RuntimeError("troupe serve did not stop within 20 s of SIGTERM")
        self.log.close()
        if self.proc.returncode != expect_code:
            raise RuntimeError(f"troupe serve exited {self.proc.returncode}, expected {expect_code}:\n{self.output()}")


def infer_body(ref, rows=None, with_ids=None):
    """An infer request for `rows` of a model's reference.json (all by default)."""
    dense = ref["dense"] if rows is None else [ref["dense"][r] for r in rows]
    body = {"id": "t", "inputs": [{"name": "dense", "datatype": "FP32", "shape": [len(dense), len(dense[0])],
                                   "data": dense}]}
    if "ids" in ref and with_ids is not False:
        ids = ref["ids"] if rows is None else [ref["ids"][r] for r in rows]
        body["inputs"].append({"name": "ids", "datatype": "INT64", "shape": [len(ids), len(ids[0])], "data": ids})
    return body


def binary_infer(ref, rows=None):
    """The same request with the binary tensor data extension: (body bytes, headers). Every input's
    data after the JSON header, little-endian, row-major, in the order of "inputs"."""
    body = infer_body(ref, rows)
    blobs = []
    for t in body["inputs"]:
        flat = [v for row in t.pop("data") for v in row]
        blobs.append(struct.pack(f"<{len(flat)}{'f' if t['datatype'] == 'FP32' else 'q'}", *flat))
        t["parameters"] = {"binary_data_size": len(blobs[-1])}
    head = json.dumps(body).encode()
    return head + b"".join(blobs), {"Content-Type": "application/octet-stream",
                                    "Inference-Header-Content-Length": str(len(head))}


def close(a, b, tol=1e-5):
    return abs(a - b) <= tol * max(1.0, abs(b))


def check_answer(answer, ref, rows=None):
    """The answer's outputs against PyTorch's for the same rows; returns a list of problems."""
    rows = list(range(len(ref["dense"]))) if rows is None else rows
    out = {o["name"]: o for o in answer["outputs"]}
    problems = []
    for name in ("logits", "probabilities"):
        want = [v for r in rows for v in ref[name][r]]
        got = out[name]["data"]
        if out[name]["shape"] != [len(rows), len(ref[name][0])]:
            problems.append(f"{name}: shape {out[name]['shape']}")
        for k, (g, w) in enumerate(zip(got, want)):
            if not close(g, w):
                problems.append(f"{name}[{k}]: {g} != {w}")
    if "class_ids" in ref:
        want = [ref["class_ids"][r] for r in rows]
        if out["class_ids"]["data"] != want:
            problems.append(f"class_ids {out['class_ids']['data']} != {want}")
    return problems


def ask_row(url, ref, row, timeout=30):
    """One row of a model's reference.json to `url` (an infer endpoint); raises unless the answer is
    200 with PyTorch's outputs for that row."""
    import requests  # here: the helpers above need only the standard library

    r = requests.post(url, json=infer_body(ref, [row]), timeout=timeout)
    assert r.status_code == 200, r.text
    problems = check_answer(r.json(), ref, [row])
    assert not problems, f"row {row}: {problems[:3]}"


class RowLoad:
    """`clients` threads asking ref's rows in turn (ask_row) until stop(): `done` answers counted,
    `errors` kept (repr); `pause` seconds between one client's requests."""

    def __init__(self, url, ref, clients=4, pause=0.0):
        import threading

        self.url, self.ref, self.pause = url, ref, pause
        self.done, self.errors = 0, []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(clients)]
        for t in self._threads:
            t.start()

    def _run(self):
        k = 0
        while not self._stop.is_set():
            try:
                ask_row(self.url, self.ref, k % len(self.ref["dense"]))
                with self._lock:
                    self.done += 1
            except Exception as e:  # noqa: BLE001 -- every failure is the test's to report
                with self._lock:
                    self.errors.append(repr(e))
            k += 1
            if self.pause:
                time.sleep(self.pause)

    def stop(self):
        self._stop.set()
        for t in self._threads:
            t.join()


def watchdog(seconds):
    """After `seconds` (set below ctest's TIMEOUT), a test still running prints where each of its
    threads waits and exits 1: ctest's timeout kills a test with nothing said (serve_admin timed out
    at 240 s once in a full suite run, 2026-12-02, and passed in 7 s alone and under load since)."""
    import faulthandler
    faulthandler.dump_traceback_later(seconds, exit=True)


class TestFailure(Exception):
    pass


def fail(msg):
    """Fails the test: raised, so that the servers' `finally` blocks stop them."""
    print("FAIL: " + msg, flush=True)
    raise TestFailure(msg)


def wait_for(pred, what, timeout=120):
    """pred() until it is true (its value returned), or the test fails naming `what`."""
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    fail(f"timed out waiting for {what}")


def pid_of_node(node, root):
    """The pid of the process whose environment says TROUPE_NODE=<node> and whose command line names
    `root` (a replica before it is ready: server.json has its pid only then), or None. Another test's
    server has a replica of that name too (ctest -j2: one was killed in its place)."""
    want = f"TROUPE_NODE={node}".encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if want not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if root.encode() in f.read():
                    return int(d)
        except OSError:
            pass
    return None
