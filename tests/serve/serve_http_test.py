#!/usr/bin/env python3
"""`troupe serve` through real clients (python3-requests, urllib, wrk) on loopback.

  serve_http_test.py TROUPE WORK_DIR [answers|bad_input|fuzz|wrk|drain|admin]

answers    a dense multiclass MLP, a binary LR and a sparse DeepFM (models made with PyTorch,
           make_models.py) served and queried: every output equals PyTorch's to 1e-5, one row
           and several, through requests and urllib; the metadata and health routes.
bad_input  every bad input of docs/serving.md with its status and message: 413, 400 for wrong
           shapes, types and names and malformed JSON, 404, 405, 431, slow clients closed after
           read_timeout_ms, too many connections (503), each without harm to another client's
           requests; then a slow model (~120 ms a forward: longer than request_timeout_ms on any
           CPU) flooded: 503 with Retry-After past the queue's bound, 504 past request_timeout_ms.
fuzz       FUZZ_SECONDS (default 8) of random requests from 4 threads: never a 500, never a hang,
           never a crash; valid requests answered right throughout.
wrk        wrk with the benchmark's POST script: every answer 2xx.
drain      SIGTERM with drain_ms: readiness 503 while requests are still answered, then exit 0.
admin      troupe serve status (serving, stopped, dead after a SIGKILL) and troupe serve stop; the
           access log and X-Request-ID.
"""
import gzip
import http.client
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import signal
import threading
import time
import urllib.request

import requests

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from serve_lib import (Server, TestFailure, binary_infer, check_answer, fail, free_port, infer_body, log,  # noqa: E402
                       make_models, pid_of_node, wait_for, watchdog)

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load_ref(models, name):
    with open(os.path.join(models, name, "reference.json")) as f:
        return json.load(f)


def answers(troupe, work, models):
    for name in ("mlp", "lr", "deepfm"):
        ref = load_ref(models, name)
        pin = ["--set", "serve.pin_cpus=true"] if name == "lr" else []
        srv = Server(troupe, os.path.join(models, name), os.path.join(work, "jobs"), name, "--replicas", "2", *pin)
        try:
            srv.wait_ready()
            # Every row at once, then one row at a time (each through its own batch or another's).
            r = requests.post(srv.infer_url(), json=infer_body(ref), timeout=10)
            if r.status_code != 200:
                fail(f"{name}: {r.status_code} {r.text}")
            a = r.json()
            if a["model_name"] != name or a["id"] != "t":
                fail(f"{name}: {a['model_name']} {a.get('id')}")
            if problems := check_answer(a, ref):
                fail(f"{name}: {problems[:5]}")
            # The binary tensor data extension: the same rows as bytes after the JSON, the same answer.
            data, headers = binary_infer(ref)
            r = requests.post(srv.infer_url(), data=data, headers=headers, timeout=10)
            if r.status_code != 200 or (problems := check_answer(r.json(), ref)):
                fail(f"{name}: binary request: {r.status_code} {r.text[:300]}")
            for row in range(len(ref["dense"])):
                req = urllib.request.Request(srv.infer_url(), data=json.dumps(infer_body(ref, [row])).encode(),
                                             headers={"Content-Type": "application/json"}, method="POST")
                with urllib.request.urlopen(req, timeout=10) as resp:
                    one = json.loads(resp.read())
                if problems := check_answer(one, ref, [row]):
                    fail(f"{name} row {row}: {problems}")
            # Concurrent single rows: batched together, each answered with its own row.
            results = {}

            def ask(row):
                s = requests.Session()
                for _ in range(5):
                    results.setdefault(row, []).append(s.post(srv.infer_url(), json=infer_body(ref, [row]), timeout=10))

            threads = [threading.Thread(daemon=True, target=ask, args=(row,)) for row in range(len(ref["dense"]))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            for row, rs in results.items():
                for resp in rs:
                    if resp.status_code != 200 or check_answer(resp.json(), ref, [row]):
                        fail(f"{name}: concurrent row {row}: {resp.status_code} {resp.text[:300]}")
            meta = requests.get(f"{srv.url}/v2/models/{name}", timeout=5).json()
            version = f"job-{name}-1@"
            if not meta["versions"][0].startswith(version) or meta["troupe"]["job_id"] != f"job-{name}-1":
                fail(f"{name}: metadata {meta}")
            want_inputs = [{"name": "dense", "datatype": "FP32", "shape": [-1, len(ref["dense"][0])]}]
            if "ids" in ref:
                want_inputs.append({"name": "ids", "datatype": "INT64", "shape": [-1, len(ref["ids"][0])]})
            if meta["inputs"] != want_inputs or meta["platform"] != "pytorch_torchscript":
                fail(f"{name}: inputs {meta['inputs']}")
            outs = [o["name"] for o in meta["outputs"]]
            if outs != (["logits", "probabilities", "class_ids", "class_names"] if name == "mlp"
                        else ["logits", "probabilities"]):
                fail(f"{name}: outputs {outs}")
            if a["model_version"] != meta["versions"][0]:
                fail(f"{name}: answer version {a['model_version']} vs {meta['versions']}")
            for path, want in ((f"/v2/models/{name}/ready", {"name": name, "ready": True}),
                               ("/v2/health/ready", {"ready": True}), ("/v2/health/live", {"live": True})):
                got = requests.get(srv.url + path, timeout=5)
                if got.status_code != 200 or got.json() != want:
                    fail(f"{path}: {got.status_code} {got.text}")
            v2 = requests.get(srv.url + "/v2", timeout=5).json()
            if v2["name"] != "troupe":
                fail(f"/v2: {v2}")
            by_version = requests.post(f"{srv.url}/v2/models/{name}/versions/{meta['versions'][0]}/infer",
                                       json=infer_body(ref, [0]), timeout=10)
            if by_version.status_code != 200:
                fail(f"versions/<v>/infer: {by_version.status_code} {by_version.text}")
            metrics = requests.get(srv.url + "/metrics", timeout=5).text
            for series in ("troupe_serve_request_seconds_bucket", "troupe_serve_batch_rows_bucket",
                           "troupe_serve_queue_rows", f'troupe_serve_rows_total{{model="{name}",version="{version}',
                           "troupe_serve_replica_restarts_total", "troupe_serve_rows_per_second"):
                if series not in metrics:
                    fail(f"/metrics lacks {series}")
            state = srv.state()
            if state["state"] != "serving" or state["replicas_ready"] != 2 or len(state["replicas"]) != 2:
                fail(f"server.json: {state}")
            if name == "mlp":
                dashboard_lists(troupe, srv)
                shared_root(troupe, work, models)
            if pin:
                # Slot s on CPU s (threads 1), modulo the CPUs: libtorch's threads inherit the mask.
                for r in state["replicas"]:
                    slot = int(r["node"].rsplit("-", 1)[1])
                    with open(f"/proc/{r['pid']}/status") as f:
                        allowed = [ln.split()[1] for ln in f if ln.startswith("Cpus_allowed_list")][0]
                    if allowed != str(slot % os.cpu_count()):
                        fail(f"{r['node']} runs on CPUs {allowed}, expected {slot % os.cpu_count()} (pin_cpus)")
            log(f"{name}: answers equal PyTorch's ({len(ref['dense'])} rows), metadata and health right")
        finally:
            srv.stop()
        if srv.state()["state"] != "stopped":
            fail("server.json does not say stopped after SIGTERM")
        if "[" not in srv.output() or "req/s" not in srv.output():
            fail("no progress line:\n" + srv.output())


def dashboard_lists(troupe, srv):
    """`troupe dashboard` over the same root lists the running server (from its server.json)."""
    port = free_port()
    dash = subprocess.Popen([troupe, "dashboard", "--root", srv.root, "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        end = time.time() + 20
        while True:
            try:
                servers = requests.get(f"http://127.0.0.1:{port}/api/servers", timeout=2).json()["servers"]
                row = [s for s in servers if s["name"] == srv.name]
                if row and row[0]["state"] == "serving" and row[0]["replicas_ready"] == 2:
                    break
            except requests.RequestException:
                pass
            if time.time() > end:
                fail(f"the dashboard does not list {srv.name} as serving")
            time.sleep(0.1)
        if row[0]["url"] != f"http://127.0.0.1:{srv.port}/v2/models/{srv.name}":
            fail(f"dashboard row: {row[0]}")
        jobs = requests.get(f"http://127.0.0.1:{port}/api/jobs", timeout=2).json()["jobs"]
        if any(j["id"] == "serve" for j in jobs):
            fail("the dashboard lists serve/ as a job")
    finally:
        dash.terminate()
        dash.wait(timeout=10)
    log("the dashboard lists the server")


def shared_root(troupe, work, models):
    """A jobs root another user made serve/ in (uid 65534 here, the test runs as root): this user's
    servers keep their state in serve-<uid> beside it (a second user's server failed: Permission
    denied), `troupe serve reload` finds them there, the dashboard lists them; a serve-<uid> another
    user made is refused, naming it."""
    root = os.path.join(work, "shared-root")
    shutil.rmtree(root, ignore_errors=True)  # an earlier run's
    os.makedirs(os.path.join(root, "serve"), exist_ok=True)
    os.chmod(root, 0o1777)
    os.chown(os.path.join(root, "serve"), 65534, 65534)
    mine = os.path.join(root, f"serve-{os.geteuid()}")
    srv = Server(troupe, os.path.join(models, "mlp"), root, "mine")
    try:
        srv.wait_ready()
        if not os.path.isfile(os.path.join(mine, "mine", "server.json")) or os.listdir(os.path.join(root, "serve")):
            fail(f"the server's state is not in {mine}: {sorted(os.listdir(root))}")
        r = subprocess.run([troupe, "serve", "reload", "--root", root], capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or "mine now serves" not in r.stdout:
            fail(f"serve reload under the shared root: exit {r.returncode}: {r.stdout} {r.stderr}")
        port = free_port()
        dash = subprocess.Popen([troupe, "dashboard", "--root", root, "--listen", f"127.0.0.1:{port}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            end, rows = time.time() + 20, []
            while not rows and time.time() < end:
                try:
                    servers = requests.get(f"http://127.0.0.1:{port}/api/servers", timeout=2).json()["servers"]
                    rows = [s for s in servers if s["name"] == "mine"]
                except requests.RequestException:
                    time.sleep(0.1)
            if not rows or rows[0].get("servers_dir") != os.path.basename(mine):
                fail(f"the dashboard does not list the server of {mine}: {rows}")
        finally:
            dash.terminate()
            dash.wait(timeout=10)
    finally:
        srv.stop()
    os.chown(mine, 65534, 65534)
    r = subprocess.run([troupe, "serve", os.path.join(models, "mlp"), "--name", "mine", "--root", root,
                        "--listen", f"127.0.0.1:{free_port()}"], capture_output=True, text=True, timeout=60)
    if r.returncode != 2 or "another user's (uid 65534)" not in r.stdout + r.stderr:
        fail(f"serve-<uid> made by another user: exit {r.returncode}: {(r.stdout + r.stderr)[-600:]}")
    log("a root another user made serve/ in: this user's servers in " + os.path.basename(mine))


def expect(resp, status, *fragments):
    body = resp.text if hasattr(resp, "text") else resp
    if resp.status_code != status or any(f not in body for f in fragments):
        fail(f"expected {status} with {fragments}, got {resp.status_code}: {body[:500]}")


def raw_request(port, data, read=True, timeout=5):
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
        return out


def closed_by_peer(s):
    """Whether the server has closed the idle socket `s` (its read gives EOF or a reset at once)."""
    s.setblocking(False)
    try:
        return s.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def bad_input(troupe, work, models):
    ref = load_ref(models, "mlp")
    root = os.path.join(work, "jobs")
    stops = []
    srv = Server(troupe, os.path.join(models, "mlp"), root, "mlp", "--max-batch", "8",
                 "--set", "serve.max_body_bytes=65536", "--set", "serve.read_timeout_ms=700",
                 "--set", "serve.max_connections=24")
    try:
        srv.wait_ready()
        url = srv.infer_url()
        good = infer_body(ref, [0])
        # Another client's requests go on meanwhile, and must all succeed.
        stop = threading.Event()
        bystander = {"ok": 0, "bad": []}
        # Parked (its connection closed) while the connection limit is tried: its keep-alive connection
        # held a slot, and when a loaded machine held the thread back past read_timeout_ms the server
        # closed it, freeing a slot the 31st connection then took (a CI run saw that 200).
        paused, parked = threading.Event(), threading.Event()

        def by():
            s = requests.Session()
            while not stop.is_set():
                if paused.is_set():
                    if not parked.is_set():
                        s.close()
                        s = requests.Session()
                        parked.set()
                    time.sleep(0.01)
                    continue
                parked.clear()
                try:
                    r = s.post(url, json=good, timeout=10)
                    if r.status_code == 200 and not check_answer(r.json(), ref, [0]):
                        bystander["ok"] += 1
                    else:
                        bystander["bad"].append(f"{r.status_code} {r.text[:200]}")
                except requests.RequestException as e:
                    bystander["bad"].append(repr(e))
                time.sleep(0.01)

        t = threading.Thread(daemon=True, target=by)
        t.start()
        stops.append(stop)
        # A second server of the same name under the same root is refused.
        twin = subprocess.run([troupe, "serve", os.path.join(models, "mlp"), "--name", "mlp", "--root", root,
                               "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
        if twin.returncode != 2 or "a server named 'mlp' already runs" not in twin.stderr:
            fail(f"a second server named mlp: exit {twin.returncode}: {twin.stderr[-500:]}")
        # The same command twice (the same port too): still the name's problem, not "address in use".
        twin = subprocess.run([troupe, "serve", os.path.join(models, "mlp"), "--name", "mlp", "--root", root,
                               "--listen", url.split("/")[2]], capture_output=True, text=True, timeout=60)
        if twin.returncode != 2 or "a server named 'mlp' already runs" not in twin.stderr:
            fail(f"the same serve command twice: exit {twin.returncode}: {twin.stderr[-500:]}")
        post = lambda body, **kw: requests.post(url, data=body, timeout=10, **kw)  # noqa: E731
        expect(post("x" * 70000), 413, "request body too large: more than 65536 bytes")
        expect(post("{\"inputs\": ["), 400, "malformed JSON", "\"error\"")
        expect(post("not json"), 400, "malformed JSON (byte 1): invalid literal")
        expect(post(json.dumps({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 11],
                                            "data": [0] * 11}]})),
               400, "inputs[0] 'dense': shape [1, 11], expected [rows, 12] (rows 1 to 8)")
        expect(post(json.dumps({"inputs": [{"name": "dense", "datatype": "INT64", "shape": [1, 12],
                                            "data": [0] * 12}]})),
               400, "inputs[0] 'dense': datatype \\\"INT64\\\", expected \\\"FP32\\\"")
        expect(post(json.dumps({"inputs": [{"name": "image", "datatype": "FP32", "shape": [1, 12],
                                            "data": [0] * 12}]})),
               400, "inputs[0].name 'image': this model takes 'dense' FP32 [rows, 12]")
        expect(post(json.dumps({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [1, 12],
                                            "data": [0] * 11 + ["x"]}]})),
               400, "inputs[0] 'dense'.data[11]: a string")
        expect(post(json.dumps({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [9, 12],
                                            "data": [0] * 108}]})),
               400, "9 rows; this server takes at most 8 rows per request (max_batch)")
        expect(post(json.dumps({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [2, 12],
                                            "data": [0] * 12}]})),
               400, "12 values in data for shape [2, 12] (24 expected)")
        expect(post(json.dumps({"outputs": []})), 400, "'inputs' missing")
        expect(post(gzip.compress(json.dumps(good).encode()), headers={"Content-Encoding": "gzip"}), 415,
               "Content-Encoding 'gzip': not supported")
        expect(post(json.dumps(dict(good, inputs=[dict(good["inputs"][0], parameters=[1])]))), 400,
               "inputs[0] 'dense'.parameters: expected an object, got an array")
        # Valid FP32 values whose forward overflows: no made-up answer (it was a 200 with null logits and
        # probabilities, and class 0).
        overflow = post(json.dumps({"inputs": [{"name": "dense", "datatype": "FP32", "shape": [2, 12],
                                                "data": [0.5] * 12 + [3.4e38] * 12}]}))
        expect(overflow, 422, "row 1: the model's output is not finite")
        # Said as a value (it read "(-nan)", printf's word).
        if not any(w in overflow.text for w in ("(NaN)", "(inf)", "(-inf)")):
            fail(f"the value not said as NaN or inf: {overflow.text[:300]}")
        expect(requests.post(f"{srv.url}/v2/models/other/infer", json=good, timeout=5), 404,
               "model 'other' not found: this server serves 'mlp'")
        expect(requests.post(f"{srv.url}/v2/models/mlp/versions/nope/infer", json=good, timeout=5), 404,
               "version 'nope' not found")
        r = requests.get(url, timeout=5)
        expect(r, 405, "allowed: POST")
        if r.headers.get("Allow") != "POST":
            fail(f"405 without Allow: {r.headers}")
        expect(requests.get(srv.url + "/nothing", timeout=5), 404, "no such route")
        expect(requests.post(url, data=b"\x00\x01", headers={"Inference-Header-Content-Length": "2"}, timeout=5),
               400, "malformed JSON")
        expect(requests.post(url, data=b"{}", headers={"Inference-Header-Content-Length": "two"}, timeout=5),
               400, "Inference-Header-Content-Length 'two': expected the JSON header's length in bytes")
        # The header twice: a list, refused (the last one was used silently).
        twice = raw_request(srv.port, b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                            b"Inference-Header-Content-Length: 2\r\nInference-Header-Content-Length: 2\r\n"
                            b"Content-Length: 2\r\n\r\n{}")
        if not twice.startswith(b"HTTP/1.1 400") or b"Inference-Header-Content-Length '2, 2'" not in twice:
            fail(f"two Inference-Header-Content-Length headers: {twice[:300]!r}")
        data, headers = binary_infer(ref, [0])
        expect(requests.post(url, data=data[:-4], headers=headers, timeout=5), 400,
               "binary_data_size 48 at byte 0 of the binary data, which has 44 bytes")
        # Every answer to an inference request is counted by status, those refused before a route
        # (413) or by the route (another model: 404; GET: 405) too (they were missing until 2026-11-30).
        metrics = requests.get(srv.url + "/metrics", timeout=5).text
        for code, least in (("413", 1), ("404", 2), ("405", 1), ("400", 9)):
            series = f'troupe_serve_requests_total{{model="mlp",code="{code}"}}'
            line = [ln for ln in metrics.splitlines() if ln.startswith(series + " ")]
            if not line or float(line[0].split()[-1]) < least:
                fail(f"/metrics: {series} {line}, expected >= {least}")
        # A transfer coding the server does not undo: 501, the client's choice (counted as the
        # server's failure until 2026-12-03).
        gz = raw_request(srv.port, b"POST " + url.split(str(srv.port), 1)[1].encode() +
                         b" HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n")
        if not gz.startswith(b"HTTP/1.1 501"):
            fail(f"gzip, chunked: {gz[:100]}")
        # server.json (rewritten every second) counts them as refused, the client's fault, not as the
        # server's errors (the progress line's "errors" counted both until 2026-12-01).
        deadline = time.time() + 10
        while srv.state().get("requests_refused", 0) < 14 and time.time() < deadline:
            time.sleep(0.2)
        state = srv.state()
        if state.get("requests_refused", 0) < 14 or state.get("requests_failed") != 0:
            fail(f"server.json after 14 refused requests and no failure: refused "
                 f"{state.get('requests_refused')}, failed {state.get('requests_failed')}")
        # Headers over 8 KiB: 431; garbage: 400.
        big = raw_request(srv.port, b"GET /v2 HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        if not big.startswith(b"HTTP/1.1 431"):
            fail(f"huge headers: {big[:100]}")
        garbage = raw_request(srv.port, b"\x16\x03\x01\x02\x00 garbage\r\n\r\n")
        if not garbage.startswith(b"HTTP/1.1 400"):
            fail(f"garbage: {garbage[:100]}")
        # A slow client (half a request line, then silence) is closed after read_timeout_ms.
        t0 = time.time()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
            s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"inp")
            if s.recv(100) not in (b"",) and time.time() - t0 > 5:
                fail("slow client answered late")
        took = time.time() - t0
        if not 0.5 < took < 3:
            fail(f"slow client closed after {took:.2f} s (read_timeout_ms 700)")
        # Too many connections: past max_connections, 503 at once; the server serves again after.
        # The server accepts in order, so the 31st connection is counted after the 30 before it; but
        # each idle one is closed read_timeout_ms (700) after its accept, and on a loaded machine that
        # can pass before the 31st is accepted (a CI run saw a 200 so). A 200 fails the test when none
        # of the 30 had been closed by the time it came back; otherwise the round is tried again (5 in all).
        paused.set()
        if not parked.wait(10):
            fail("the bystander did not park")
        time.sleep(0.2)  # its closed connection counted out by the server
        for attempt in range(5):
            idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(30)]
            # Connection: close, so that a wrong 200 comes back at once, with the 30 still as they were.
            over = raw_request(srv.port, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            closed = sum(1 for s in idle if closed_by_peer(s))
            for s in idle:
                s.close()
            if over.startswith(b"HTTP/1.1 503") and b"too many clients" in over:
                break
            if closed == 0 or attempt == 4:
                fail(f"connection {len(idle) + 1} over max_connections 24 ({closed} of the 30 closed by the "
                     f"server's read timeout first, attempt {attempt + 1}): {over[:200]}")
            log(f"connection limit: {closed} of the 30 idle connections timed out before the 31st was "
                f"accepted (a loaded machine); again")
            time.sleep(0.3)
        time.sleep(0.3)
        paused.clear()
        expect(requests.post(url, json=good, timeout=5), 200, "logits")
        stop.set()
        t.join()
        if bystander["bad"] or bystander["ok"] < 5:
            fail(f"the bystander's requests: {bystander['ok']} right, failed: {bystander['bad'][:5]}")
        log(f"400/404/405/413/431 each with its message; slow client closed after {took:.2f} s; "
            f"503 past max_connections; the bystander's {bystander['ok']} requests all right")
    finally:
        for s in stops:
            s.set()
        srv.stop()
    # Backpressure and timeouts on a slow model (~120 ms a forward, longer than request_timeout_ms on any
    # CPU, so a request queued behind a forward times out): a tiny queue overflows.
    slow = Server(troupe, os.path.join(models, "slow"), root, "slow", "--max-batch", "2", "--max-queue-rows", "6",
                  "--set", "serve.warmup=1", "--set", "serve.pipeline=1", "--set", "serve.request_timeout_ms=20")
    try:
        slow.wait_ready()
        codes = {}
        lock = threading.Lock()
        retry_after = []

        def flood():
            s = requests.Session()
            for _ in range(6):
                r = s.post(slow.infer_url(), json=infer_body(ref, [0]), timeout=10)
                with lock:
                    codes[r.status_code] = codes.get(r.status_code, 0) + 1
                    if r.status_code == 503:
                        retry_after.append(r.headers.get("Retry-After"))
                        if "the queue is full (max_queue_rows 6" not in r.text:
                            fail("503 without its reason: " + r.text)
                    if r.status_code == 504 and "request_timeout_ms (20 ms)" not in r.text:
                        fail("504 without its reason: " + r.text)
                    if r.status_code not in (200, 503, 504):
                        fail(f"{r.status_code}: {r.text}")

        threads = [threading.Thread(daemon=True, target=flood) for _ in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if not codes.get(503) or not codes.get(504) or not codes.get(200) or set(retry_after) != {"1"}:
            fail(f"flood of a slow model through a queue of 6 rows: {codes}, Retry-After {set(retry_after)}")
        metrics = requests.get(slow.url + "/metrics", timeout=5).text
        if 'troupe_serve_requests_total{model="slow",code="503"}' not in metrics:
            fail("no 503 count in /metrics")
        log(f"a slow model flooded by 24 clients: {codes} (503 with Retry-After: 1 past the queue's 6 rows, "
            f"504 past request_timeout_ms 20)")
    finally:
        slow.stop()
    taken_port(troupe, models, root)


def taken_port(troupe, models, root):
    """A listen address another process holds fails at once, before any replica is launched."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        t0 = time.time()
        r = subprocess.run([troupe, "serve", os.path.join(models, "mlp"), "--name", "taken", "--root", root,
                            "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
        took = time.time() - t0
    out = r.stdout + r.stderr
    # Exit 2, as run's taken metrics_port and dashboard's --listen (it was 1 here alone).
    if r.returncode != 2 or f"127.0.0.1:{port}: Address already in use" not in out:
        fail(f"troupe serve on a taken port: exit {r.returncode}, {out[-600:]}")
    if "launched" in out:
        fail(f"troupe serve launched replicas before finding its port taken: {out[-600:]}")
    if os.path.exists(os.path.join(root, "serve", "taken")):
        fail("troupe serve on a taken port left serve/taken/ behind")
    log(f"a taken port: exit 2 in {took:.2f} s, naming the address, no replica launched")
    # The port is the server's from its start: a liveness probe is answered while its replicas load
    # (the port opened only once they were ready), and a second server told the same port meanwhile
    # fails without loading anything (both used to load, and the later to open it failed).
    first = Server(troupe, os.path.join(models, "mlp"), root, "early")
    try:
        port, base = first.port, first.url
        deadline = time.time() + 60
        while True:
            try:
                live = requests.get(base + "/v2/health/live", timeout=5)
                break
            except requests.ConnectionError:
                if time.time() > deadline:
                    fail("the first server's port never opened")
                time.sleep(0.01)
        if live.status_code != 200:
            fail(f"/v2/health/live while loading: {live.status_code} {live.text}")
        ready = requests.get(base + "/v2/health/ready", timeout=5)
        if ready.status_code == 503:
            infer = requests.post(base + "/v2/models/early/infer", json={"inputs": []}, timeout=5)
            if infer.status_code not in (503, 400) or (infer.status_code == 503 and "loading" not in infer.text):
                fail(f"an infer request while loading: {infer.status_code} {infer.text}")
        log(f"while loading: live {live.status_code}, ready {ready.status_code}")
        r = subprocess.run([troupe, "serve", os.path.join(models, "mlp"), "--name", "late", "--root", root,
                            "--listen", f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
        out = r.stdout + r.stderr
        if r.returncode != 2 or "Address already in use" not in out or "launched" in out:
            fail(f"a second server on the port of one still loading: exit {r.returncode}, {out[-600:]}")
        first.wait_ready()
    finally:
        first.stop()


def fuzz(troupe, work, models):
    ref = load_ref(models, "deepfm")
    root = os.path.join(work, "jobs")
    srv = Server(troupe, os.path.join(models, "deepfm"), root, "deepfm", "--max-batch", "16",
                 "--set", "serve.read_timeout_ms=1000")
    seconds = float(os.environ.get("FUZZ_SECONDS", "8"))
    seed = int(os.environ.get("FUZZ_SEED", str(random.randrange(1 << 30))))
    log(f"fuzzing for {seconds} s, FUZZ_SEED={seed}")
    good = json.dumps(infer_body(ref, [0, 1]))
    problems, counts = [], {}
    lock = threading.Lock()
    try:
        srv.wait_ready()

        def mutate(rng, s):
            s = bytearray(s.encode())
            for _ in range(rng.randint(1, 6)):
                at = rng.randrange(max(1, len(s)))
                op = rng.randrange(4)
                if op == 0 and s:
                    s[at] = rng.randrange(256)
                elif op == 1:
                    del s[at:at + rng.randint(1, 30)]
                elif op == 2:
                    s[at:at] = rng.choice([b"[", b"]", b"{", b"}", b"\"", b",", b"-1e999", b"null", b"9" * 30,
                                           b"\"ids\"", b"\"dense\"", b"[[[[", b"\\u0000"])
                else:
                    s[at:at] = s[rng.randrange(len(s)):][:rng.randint(1, 200)] if s else b""
            return bytes(s)

        def worker(k):
            rng = random.Random(seed + k)
            sess = requests.Session()
            end = time.time() + seconds
            while time.time() < end:
                kind = rng.randrange(6)
                try:
                    if kind == 0:  # raw garbage or broken HTTP
                        data = bytes(rng.randrange(256) for _ in range(rng.randint(1, 300)))
                        raw_request(srv.port, rng.choice([b"", b"POST /v2/models/deepfm/infer HTTP/1.1\r\n"]) + data,
                                    timeout=3)
                        code = "raw"
                    elif kind == 1:  # random method and path
                        method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
                        path = rng.choice(["/v2", "/v2/models/deepfm", "/v2/models/deepfm/infer", "/v2/health/ready",
                                           "/metrics", "/v2/models/%2e%2e/infer", "/v2/models/deepfm/versions/x/ready",
                                           "/" + "a/" * rng.randint(0, 50)])
                        code = sess.request(method, srv.url + path, data=mutate(rng, good) if rng.random() < .5 else None,
                                            timeout=10).status_code
                    elif kind == 2:  # a valid request: must be answered right
                        r = sess.post(srv.infer_url(), data=good, timeout=10)
                        code = r.status_code
                        if code != 200 or check_answer(r.json(), ref, [0, 1]):
                            with lock:
                                problems.append(f"valid request: {code} {r.text[:200]}")
                    else:  # a mutated body
                        r = sess.post(srv.infer_url(), data=mutate(rng, good), timeout=10,
                                      headers={"Content-Type": rng.choice(["application/json", "text/plain", "x"])})
                        code = r.status_code
                        if code == 400 and "error" not in r.json():
                            with lock:
                                problems.append(f"400 without an error: {r.text[:200]}")
                    with lock:
                        counts[code] = counts.get(code, 0) + 1
                        if code not in ("raw", 200, 400, 404, 405, 413, 422):  # 422: a mutation overflowed forward
                            problems.append(f"status {code}")
                except (requests.RequestException, OSError) as e:
                    with lock:
                        problems.append(f"{type(e).__name__}: {e}")
                    sess = requests.Session()

        threads = [threading.Thread(daemon=True, target=worker, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if srv.proc.poll() is not None:
            fail(f"troupe serve died during the fuzz (FUZZ_SEED={seed}):\n{srv.output()[-3000:]}")
        if problems:
            fail(f"FUZZ_SEED={seed}: {len(problems)} problems, first: {problems[:5]}")
        r = requests.post(srv.infer_url(), data=good, timeout=5)
        if r.status_code != 200 or check_answer(r.json(), ref, [0, 1]):
            fail("not serving right after the fuzz")
        log(f"fuzz: {sum(counts.values())} requests {counts}, no 500, no hang, still right")
    finally:
        srv.stop()


def wrk(troupe, work, models):
    if not shutil_which("wrk"):
        fail("wrk is not installed (scripts/install-deps.sh installs it)")
    ref = load_ref(models, "mlp")
    srv = Server(troupe, os.path.join(models, "mlp"), os.path.join(work, "jobs"), "mlp", "--replicas", "2")
    try:
        srv.wait_ready()
        body = os.path.join(work, "wrk_body.json")
        with open(body, "w") as f:
            json.dump(infer_body(ref, [0]), f)
        out = subprocess.run(["wrk", "-t", "2", "-c", "16", "-d", "3s", "--latency", "-s",
                              os.path.join(SOURCE, "bench", "serve", "post.lua"), srv.infer_url()],
                             env=dict(os.environ, BODY_FILE=body), capture_output=True, text=True, timeout=60)
        log(out.stdout)
        if out.returncode != 0 or "Non-2xx" in out.stdout or "Socket errors" in out.stdout:
            fail("wrk saw errors:\n" + out.stdout + out.stderr)
        done = int(out.stdout.split(" requests in ")[0].split()[-1])
        if done < 100:
            fail(f"wrk: only {done} requests")
        metrics = requests.get(srv.url + "/metrics", timeout=5).text
        line = [ln for ln in metrics.splitlines() if ln.startswith('troupe_serve_requests_total{model="mlp",code="200"}')]
        if not line or float(line[0].split()[-1]) < done:
            fail(f"/metrics counts {line} for wrk's {done}")
        log(f"wrk: {done} requests, all 2xx")
    finally:
        srv.stop()


def drain(troupe, work, models):
    """SIGTERM with drain_ms: readiness turns 503 at once while requests are still answered, then the
    server stops by itself, exit 0 (readiness stayed 200 to the end before 2026-12-01)."""
    ref = load_ref(models, "mlp")
    srv = Server(troupe, os.path.join(models, "mlp"), os.path.join(work, "jobs"), "drain", "--set",
                 "serve.drain_ms=3000")
    try:
        srv.wait_ready()
        session = requests.Session()
        t0 = time.time()
        srv.proc.send_signal(signal.SIGTERM)
        ready = None
        while time.time() - t0 < 2:
            ready = session.get(srv.url + "/v2/health/ready", timeout=5).status_code
            if ready == 503:
                break
            time.sleep(0.02)
        if ready != 503:
            fail(f"readiness during the drain: {ready}, expected 503")
        answered = 0
        while time.time() - t0 < 2:  # well inside the 3 s drain
            r = session.post(srv.infer_url(), json=infer_body(ref, [answered % 4]), timeout=5)
            if r.status_code != 200 or check_answer(r.json(), ref, [answered % 4]):
                fail(f"an inference while draining: {r.status_code} {r.text[:200]}")
            answered += 1
        if session.get(srv.url + "/v2/health/live", timeout=5).status_code != 200:
            fail("liveness during the drain is not 200")
        rc = srv.proc.wait(timeout=30)
        took = time.time() - t0
        if rc != 0 or took < 2.5:
            fail(f"the drained server exited {rc} after {took:.1f} s (drain_ms 3000)")
        if "draining for 3000 ms" not in srv.output():
            fail("the drain is not in the log")
        log(f"drain: readiness 503 at once, {answered} inferences answered while draining, exit 0 after {took:.1f} s")
    finally:
        srv.stop()


def admin(troupe, work, models):
    """`troupe serve status` lists the servers under the root with their state, address and version
    (a server SIGKILLed is "dead": its server.json still said serving); `troupe serve stop` stops the
    one named (SIGTERM, the wait for its end), and says so when none runs (there was no command:
    one read the pid out of server.json and signalled it)."""
    root = os.path.join(work, "jobs")

    def cli(*args):
        return subprocess.run([troupe, "serve", *args, "--root", root], capture_output=True, text=True, timeout=60)

    first = Server(troupe, os.path.join(models, "mlp"), root, "first", "--set", "serve.access_log=true").wait_ready()
    second = Server(troupe, os.path.join(models, "mlp"), root, "second").wait_ready()
    try:
        time.sleep(1.2)  # server.json rewritten with the rates
        listed = cli("status", "--json")
        servers = {s["name"]: s for s in json.loads(listed.stdout)} if listed.returncode == 0 else {}
        if set(servers) != {"first", "second"} or any(s["state"] != "serving" for s in servers.values()):
            fail(f"serve status --json: exit {listed.returncode}: {listed.stdout[:500]} {listed.stderr[-300:]}")
        if servers["first"].get("listen") != f"127.0.0.1:{first.port}":
            fail(f"serve status: first listens on {servers['first'].get('listen')}, not {first.port}")
        # [serve] access_log: a line per request, the X-Request-ID sent back and logged.
        ref = load_ref(models, "mlp")
        answer = requests.post(first.infer_url(), json=infer_body(ref, [0]), headers={"X-Request-ID": "abc-7"},
                               timeout=10)
        if answer.status_code != 200 or answer.headers.get("X-Request-ID") != "abc-7":
            fail(f"an infer with X-Request-ID: {answer.status_code} {dict(answer.headers)}")
        requests.get(first.url + "/v2/nothing", timeout=10)
        with open(os.path.join(root, "serve", "first", "logs", "access.log")) as f:
            lines = f.read().splitlines()
        want = [r' "POST /v2/models/first/infer" 200 \d+ [0-9.]+ms id=abc-7$', r' "GET /v2/nothing" 404 \d+ [0-9.]+ms$']
        for pattern in want:
            if not any(re.search(r"^\d{4}-\d\d-\d\dT[0-9:.]+Z 127\.0\.0\.1:\d+" + pattern, ln) for ln in lines):
                fail(f"access.log has no line like {pattern}: {lines[-5:]}")
        table = cli("status").stdout
        if not re.search(r"^first +serving +127\.0\.0\.1:%d " % first.port, table, re.M):
            fail(f"serve status table:\n{table}")
        # server.json names another process (edited, stale): stop signals the server holding the lock,
        # not that pid (a sleep was killed, "stopped server" said, the server served on).
        bystander = subprocess.Popen(["sleep", "300"])
        state_path = os.path.join(root, "serve", "second", "server.json")
        with open(state_path) as f:
            forged = json.load(f)
        forged["pid"] = bystander.pid
        with open(state_path + ".t", "w") as f:
            json.dump(forged, f)
        os.rename(state_path + ".t", state_path)
        # Two running: stop without --name is refused, naming both.
        both = cli("stop")
        if both.returncode != 2 or "several servers run" not in both.stderr or "first, second" not in both.stderr:
            fail(f"serve stop with two servers: exit {both.returncode}: {both.stderr[-300:]}")
        stopped = cli("stop", "--name", "first")
        if stopped.returncode != 0 or f"stopped server first (pid {first.proc.pid})" not in stopped.stdout:
            fail(f"serve stop --name first: exit {stopped.returncode}: {stopped.stdout} {stopped.stderr[-300:]}")
        if first.proc.poll() != 0:
            fail(f"the stopped server's exit: {first.proc.poll()}")
        again = cli("stop", "--name", "first")
        if again.returncode != 1 or "no server named 'first' runs" not in again.stderr:
            fail(f"serve stop of a stopped server: exit {again.returncode}: {again.stderr[-300:]}")
        if bystander.poll() is not None:
            fail("serve stop signalled the pid server.json named, not the server")
        bystander.kill()
        # SIGKILL: its server.json still says serving; status says dead.
        second.proc.kill()
        second.proc.wait(timeout=10)
        states = {s["name"]: s["state"] for s in json.loads(cli("status", "--json").stdout)}
        if states != {"first": "stopped", "second": "dead"}:
            fail(f"serve status after a stop and a SIGKILL: {states}")
        gone = cli("stop")
        if gone.returncode != 1 or "no running server" not in gone.stderr:
            fail(f"serve stop with none running: exit {gone.returncode}: {gone.stderr[-300:]}")
        log(f"serve status: both serving, then stopped / dead; serve stop: pid {first.proc.pid}, refusals named")
    finally:
        first.stop()
        second.stop(expect_code=-9)
    admin_while_starting_and_draining(troupe, models, root, cli)


def written(root, name):
    """The server.json of `name` under `root` ({} when it is not there or not whole JSON)."""
    try:
        with open(os.path.join(root, "serve", name, "server.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def admin_while_starting_and_draining(troupe, models, root, cli):
    """A server still loading its first model is stopped by `serve stop` (it was refused: "its pid is
    not in server.json yet"); `serve reload` says it is starting; one SIGKILLed while it starts is
    dead, not an earlier run's "stopped"; a draining one is "draining", and a stop that times out on
    the drain says so."""
    def state(name):
        for s in json.loads(cli("status", "--json").stdout):
            if s["name"] == name:
                return s["state"]
        return None

    servers = []
    try:
        slow = Server(troupe, os.path.join(models, "mlp"), root, "first", "--set", "serve.warmup=30000")
        servers.append(slow)
        wait_for(lambda: state("first") == "starting", "the slow server to be starting", 60)
        reload = cli("reload", "--name", "first")
        if reload.returncode != 1 or "is starting" not in reload.stderr:
            fail(f"serve reload while starting: exit {reload.returncode}: {reload.stderr[-300:]}")
        stopped = cli("stop", "--name", "first")
        if stopped.returncode != 0 or f"(pid {slow.proc.pid})" not in stopped.stdout or state("first") != "stopped":
            fail(f"serve stop while starting: exit {stopped.returncode}: {stopped.stdout} {stopped.stderr[-300:]}; "
                 f"state {state('first')}")
        slow.proc.wait(timeout=10)
        # Its replica SIGSTOPped while it loads (one slow to load, or stuck): the stop ends the start
        # at once, "stopped", exit 0 (it waited load_timeout_ms, 120 s, for the replica; `serve stop`
        # gave up, and the server then said it "could not be served", "stopped").
        hung = Server(troupe, os.path.join(models, "mlp"), root, "first", "--set", "serve.warmup=30000")
        servers.append(hung)
        pid = wait_for(lambda: pid_of_node("replica-1-0#0", root), "the replica to start", 60)
        os.kill(pid, signal.SIGSTOP)
        wait_for(lambda: state("first") == "starting", "the hung server to be starting", 60)
        stopped = cli("stop", "--name", "first", "--timeout", "20")
        if stopped.returncode != 0 or state("first") != "stopped":
            fail(f"serve stop while its replica hangs: exit {stopped.returncode}: {stopped.stdout} "
                 f"{stopped.stderr[-300:]}; state {state('first')}")
        if hung.proc.wait(timeout=10) != 0 or "could not be served" in hung.output():
            fail(f"a server stopped while it loads: exit {hung.proc.returncode}: {hung.output()[-500:]}")
        wait_for(lambda: pid_of_node("replica-1-0#0", root) is None, "its stopped replica to be gone", 20)
        killed = Server(troupe, os.path.join(models, "mlp"), root, "first", "--set", "serve.warmup=30000")
        servers.append(killed)
        # Its own server.json written (status says starting from its lock alone, before).
        wait_for(lambda: written(root, "first").get("pid") == killed.proc.pid, "the server's own server.json", 60)
        killed.proc.kill()
        killed.proc.wait(timeout=10)
        if state("first") != "dead":
            fail(f"a server SIGKILLed while it started: {state('first')}, expected dead")
        draining = Server(troupe, os.path.join(models, "mlp"), root, "first", "--set", "serve.drain_ms=20000")
        servers.append(draining)
        draining.wait_ready()
        short = cli("stop", "--name", "first", "--timeout", "1")
        if short.returncode != 1 or "it drains for its drain_ms" not in short.stderr or state("first") != "draining":
            fail(f"serve stop during a drain: exit {short.returncode}: {short.stderr[-300:]}; state {state('first')}")
        again = cli("stop", "--name", "first")
        if again.returncode != 0 or state("first") != "stopped":
            fail(f"a second serve stop during the drain: exit {again.returncode}: {again.stderr[-300:]}")
        draining.proc.wait(timeout=10)
    finally:
        for srv in servers:
            if srv.proc.poll() is None:
                srv.proc.kill()
                srv.proc.wait(timeout=10)
            srv.log.close()
    log("serve stop while starting (its replica loading, or hung), a kill while starting (dead), a drain "
        "(draining, stopped by a second stop)")


def shutil_which(cmd):
    import shutil
    return shutil.which(cmd)


def main():
    watchdog(225)  # ctest's TIMEOUT is 240 s (tests/serve/CMakeLists.txt)
    troupe, work = sys.argv[1], sys.argv[2]
    which = sys.argv[3:] or ["answers", "bad_input", "fuzz", "wrk", "drain", "admin"]
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
