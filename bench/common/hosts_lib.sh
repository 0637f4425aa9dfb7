# shellcheck shell=bash
# Helpers of the across-host benchmark scripts (bench/ps/hosts_run.sh,
# bench/storage/served_hosts_run.sh). Sourced after `set -euo pipefail`, with S set to
# scripts/hosts.sh and work to the run's directory. The hosts may be shared (other engineers'
# experiments, a Slurm cluster): they are brought up if missing and taken down at the end only if
# this script made them; the processes it started are stopped by pid. Run the scripts under `flock -o /tmp/troupe-hosts.lock`.

bg_pids=()
hosts_made=0

# hosts_begin N: hosts h1..hN up (remembering whether they were there already).
hosts_begin() {
  local have
  have=$("$S" list 2> /dev/null | grep -c '^h' || true)
  [[ $have -lt $1 ]] && hosts_made=1
  "$S" up "$1" > /dev/null
}

# on HOST CMD...: CMD in HOST (scripts/hosts.sh exec), or on this host when HOST is "local".
on() {
  local host=$1
  shift
  if [[ $host == local ]]; then "$@"; else "$S" exec "$host" "$@"; fi
}

# start_in HOST OUT CMD...: CMD in HOST (or "local") in the background, stdout and stderr to OUT;
# its pid (the command's own, pids are not namespaced) is kept for stop_all.
start_in() {
  local host=$1 out=$2
  shift 2
  rm -f "$out.pid"  # an earlier process's, if OUT is used again: its pid would be taken for this one's
  on "$host" bash -c 'echo $$ > "$0.pid"; exec "$@"' "$out" "$@" > "$out" 2>&1 &
  local deadline=$((SECONDS + 10))
  until [[ -s "$out.pid" ]]; do
    [[ $SECONDS -lt $deadline ]] || { echo "start_in: $* did not start" >&2; return 1; }
    sleep 0.05
  done
  bg_pids+=("$(cat "$out.pid")")
}

# wait_line FILE PATTERN SECONDS: waits until FILE has a line matching PATTERN; prints it.
wait_line() {
  local deadline=$((SECONDS + $3))
  until grep -q -- "$2" "$1" 2> /dev/null; do
    [[ $SECONDS -lt $deadline ]] || { echo "wait_line: no '$2' in $1 after $3 s:" >&2; cat "$1" >&2; return 1; }
    sleep 0.1
  done
  grep -m1 -- "$2" "$1"
}

# stop_all: TERM to every started process, then waits for them (up to 60 s: a PS shard writes its
# checkpoint on the way out), then KILL.
stop_all() {
  local p deadline=$((SECONDS + 60))
  for p in "${bg_pids[@]}"; do kill -TERM "$p" 2> /dev/null || true; done
  for p in "${bg_pids[@]}"; do
    while kill -0 "$p" 2> /dev/null && [[ $SECONDS -lt $deadline ]]; do sleep 0.1; done
    kill -KILL "$p" 2> /dev/null || true
  done
  bg_pids=()
}

hosts_end() {
  stop_all
  [[ $hosts_made -eq 1 ]] && "$S" down > /dev/null 2>&1
  return 0
}

# The load average now (1, 5, 15 min) as a JSON array.
load_json() { awk '{printf "[%s,%s,%s]", $1, $2, $3}' /proc/loadavg; }

# tag PLACE: JSON lines on stdin to stdout and to $work/runs.jsonl, with the place and the load average.
tag() { sed "s/^{/{\"place\":\"$1\",\"load\":$(load_json),/" | tee -a "$work/runs.jsonl"; }

# iperf3_gbps FROM TO: GB/s of a 3 s iperf3 run from host FROM to host TO.
iperf3_gbps() {
  local port=5299
  "$S" exec "$2" iperf3 -s -1 -B "$("$S" addr "$2")" -p $port > /dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  "$S" exec "$1" iperf3 -c "$("$S" addr "$2")" -p $port -t 3 -J |
    /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/8e9, 3))'
  wait $srv
}
