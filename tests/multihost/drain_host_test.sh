#!/usr/bin/env bash
# `troupe scale --host` on a shrink drains that host: a DeepFM async-PS job of 4 workers placed over
# h1 and h2 (scripts/hosts.sh namespaces, the local launcher's [cluster] hosts) is scaled down by
# the number of its workers on one host, naming it; exactly those workers leave (whatever their
# indices), the others keep running, none is relaunched on the drained host, and the job finishes
# with every record trained once. A host the job cannot place on is refused, naming it. The job's root
# is relative to the runner's working directory ("./jobs", as a user's `root = "jobs"`): the nodes on
# the hosts, whose host command starts them elsewhere, are given absolute paths (they failed with
# "--job-dir: Directory does not exist: jobs/...").
# Usage: drain_host_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=drain-host HOSTS=2
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

# Six passes over the rows: the job outlasts the checks before the scale (with 2, about 8 s, it
# finished before the scale took effect once, in a CI run's full suite, 2026-12-02).
rows=600000 epochs=6
{ deepfm_toml "." "$cache" drain 4 $rows; hosts_section h1:3 h2:3; } > "$work/drain.toml"
(cd "$work" && exec "$B" run drain.toml --job-id drain --set train.epochs=$epochs > "$work/drain.out" 2> "$work/drain.err") &
runner=$!
job=$work/jobs/drain
status() { "$B" status --json --job-dir "$job" 2> /dev/null; }
# The wanted workers by host, from nodes.json: "worker-1 h1" lines of the running ones.
workers() {
  python3 - "$job/nodes.json" << 'PY'
import json, sys
for n in json.load(open(sys.argv[1]))["nodes"]:
    if n["name"].startswith("worker-") and n["state"] not in ("exited", "leaving"):
        print(n["name"], n.get("host", ""))
PY
}
for _ in $(seq 1 600); do
  [[ $(status | sed -n 's/.*"done":\([0-9]*\).*/\1/p' | head -1) -ge 20 ]] 2> /dev/null && break
  sleep 0.1
done
before=$(workers)
[[ $(wc -l <<< "$before") == 4 ]] || fail "4 workers expected running, nodes.json has: $before"
# troupe status names each member's host (its pid is another machine's), as nodes.json has it.
placed=$(status | python3 -c 'import json, sys
for m in json.load(sys.stdin)["members"]:
    if m["node"].startswith("worker-"): print(m["node"].split("#")[0], m.get("host", ""))' | sort)
[[ $placed == "$(sort <<< "$before")" ]] || fail "troupe status hosts: $placed; nodes.json: $before"
"$B" status --job-dir "$job" 2> /dev/null | grep -q '^NODE .* PID *HOST$' || fail "no HOST column: $("$B" status --job-dir "$job" 2>&1)"
# The host holding the lowest-numbered worker: a drain is not the highest indices leaving.
drained=$(sort -t- -k2 -n <<< "$before" | head -1 | cut -d' ' -f2)
[[ $drained == h1 || $drained == h2 ]] || fail "worker hosts: $before"
n_drained=$(grep -c " $drained\$" <<< "$before")
keep=$((4 - n_drained))
((keep >= 1)) || fail "every worker is on $drained: $before"
"$B" scale --workers 2 --host h9 --job-dir "$job" > "$work/h9.out" 2>&1 && fail "scale --host h9 was taken"
grep -q "h9" "$work/h9.out" || fail "scale --host h9: $(cat "$work/h9.out")"
"$B" scale --workers "$keep" --host "$drained" --job-dir "$job" > "$work/scale.out" 2>&1 ||
  fail "scale --host $drained: $(cat "$work/scale.out")"
for _ in $(seq 1 100); do
  after=$(workers)
  [[ $(wc -l <<< "$after") == "$keep" ]] && break
  sleep 0.1
done
echo "before: $(tr '\n' ' ' <<< "$before"); scale --workers $keep --host $drained; after: $(tr '\n' ' ' <<< "$after")"
[[ $after != *" $drained"* ]] || fail "a worker on $drained is still wanted: $after"
[[ $after == "$(grep -v " $drained\$" <<< "$before")" ]] || fail "the workers off $drained changed: $after"
grep -q "those on $drained first" "$work/drain.err" "$job/logs/runner.log" 2> /dev/null ||
  fail "the runner's log does not name the drained host"
wait "$runner" || fail "the job failed (exit $?)"
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" "$work/drain.out" | tail -1; }
[[ $(field tasks_failed) == 0 ]] || fail "failed tasks"
[[ $(field records_done) == $((rows * epochs)) ]] || fail "records_done $(field records_done), expected $((rows * epochs))"
# None of the drained workers came back, and no worker was launched on the drained host after.
[[ $(field node_restarts) == 0 ]] || fail "node restarts: $(field node_restarts)"
echo "job: $(tail -1 "$work/drain.out")"
echo "drain_host_test: ok"
