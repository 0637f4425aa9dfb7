#!/usr/bin/env bash
# `troupe serve` with its replicas on other hosts (scripts/hosts.sh namespaces) through the launcher
# of [cluster] hosts (docs/serving.md): one replica on h1, one on h2, each dialling the front end on
# the bridge; answers equal PyTorch's; the replica on h2 SIGKILLed under requests: no request fails,
# and it is relaunched on a host with a free slot. Usage: serve_hosts_test.sh TROUPE_BINARY.
# Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=serve-hosts HOSTS=2 FAIL_LOGS='jobs/serve/*/logs/*.log serve.log'
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
/usr/bin/python3 "$here/tests/serve/make_models.py" "$work/models" > /dev/null || fail "making the models"
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
{ printf '[serve]\nreplicas = 2\nroot = "%s"\nlisten = "127.0.0.1:%s"\n' "$work/jobs" "$port"; hosts_section h1:1 h2:1; } > "$work/serve.toml"
"$B" serve "$work/models/mlp" --config "$work/serve.toml" --quiet > "$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2> /dev/null; wait $server 2> /dev/null; "$S" down > /dev/null 2>&1; rm -rf "$work"' EXIT
for _ in $(seq 1 600); do
  curl -sf "localhost:$port/v2/health/ready" > /dev/null && break
  kill -0 $server 2> /dev/null || fail "troupe serve exited"
  sleep 0.1
done
curl -sf "localhost:$port/v2/health/ready" > /dev/null || fail "not ready in 60 s"
/usr/bin/python3 - "$work" "$port" "$here" <<'PY' || fail "answers or the kill on h2"
import json, os, signal, sys, time
work, port, here = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, f"{here}/tests/serve")
from serve_lib import RowLoad, ask_row  # noqa: E402
url = f"http://127.0.0.1:{port}/v2/models/mlp/infer"
ref = json.load(open(f"{work}/models/mlp/reference.json"))
state = lambda: json.load(open(f"{work}/jobs/serve/mlp/server.json"))  # noqa: E731
hosts = sorted(r["host"] for r in state()["replicas"])
assert hosts == ["h1", "h2"], f"replicas on {hosts}, expected h1 and h2"
for row in range(len(ref["dense"])):
    ask_row(url, ref, row)
load = RowLoad(url, ref, clients=4)
time.sleep(1)
victim = [r for r in state()["replicas"] if r["host"] == "h2"][0]
os.kill(victim["pid"], signal.SIGKILL)
end = time.time() + 60
while time.time() < end:
    s = state()
    if s["restarts"] >= 1 and sum(r["state"] == "ready" for r in s["replicas"]) == 2:
        break
    time.sleep(0.1)
else:
    raise SystemExit("the killed replica was not relaunched in 60 s")
time.sleep(1)
load.stop()
assert not load.errors, load.errors[:3]
print(f"replicas on h1 and h2; {load.done} requests while the replica on h2 was SIGKILLed and relaunched, 0 failed")
PY
kill -TERM $server; wait $server || fail "troupe serve did not stop cleanly"
grep -q "replica-1-1#1 launched\|replica-1-0#1 launched" "$work/serve.log" || fail "no relaunch in the log"
echo "PASS: troupe serve with replicas on h1 and h2 through [cluster] hosts; a SIGKILLed replica relaunched, no request failed"
