#!/usr/bin/env bash
# PS sparse pull+push across hosts (issue 19): ps_bench's clients on h2 against a PS shard process
# on h1 (the real shard actor, over the transport), then Redis on the same host pair, same run:
# redis-server on h1, redis-benchmark on h2, pipelined SET and GET of 64-byte values (-P 1000,
# 1M random keys), with one client (one batch of 1000 in flight, as one ps_bench client) and with
# redis-benchmark's default 50. The shard is measured with 1 client and with each count of
# CLIENTS (each client its own connection and thread, as that many workers; a fresh shard each
# time); 1 client is compared with Redis' 1 client, several with Redis' 50. Then the same on this
# host over loopback. Redis without persistence (--save '' --appendonly no), the shard with its
# periodic checkpoint off (one an hour). Prints JSON lines (each with the load average) and a
# summary line per place and client count.
# Root, a release build (ps_bench) and `scripts/install-deps.sh --bench` (redis-server, redis-tools)
# needed. The hosts are shared: run under flock -o /tmp/troupe-hosts.lock.
# IN_FLIGHT (issue 29 part 3): depths D measured with one client that keeps D requests in flight
# (`ps_bench --in-flight D`, a fresh shard each), compared with Redis' 1 client.
# Usage: bench/ps/hosts_run.sh [hosts|loopback|both] [SECONDS] [CLIENTS, default "4 8"] [IN_FLIGHT, default ""]
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
S=$here/scripts/hosts.sh
B=$here/build/release/bench/ps/ps_bench
what=${1:-both}
seconds=${2:-10}
clients=${3:-4 8}
in_flight=${4:-}
work=/var/tmp/troupe-ps-hosts-$$
mkdir -p "$work"
source "$here/bench/common/hosts_lib.sh"
trap 'hosts_end; rm -rf "$work"' EXIT

# redis_rate CLIENT_HOST ADDR PORT CLIENTS: one JSON line, SET+GET ops/s of redis-benchmark.
redis_rate() {
  on "$1" redis-benchmark -h "$2" -p "$3" -t set,get -d 64 -P 1000 -n 2000000 -r 1000000 -c "$4" --csv |
    /usr/bin/python3 -c '
import csv, json, sys
r = {row["test"]: float(row["rps"]) for row in csv.DictReader(sys.stdin)}
both = 2 / (1 / r["SET"] + 1 / r["GET"])
print(json.dumps({"bench": "redis_set_get", "clients": int(sys.argv[1]), "pipeline": 1000, "value_bytes": 64,
                  "set_per_s": r["SET"], "get_per_s": r["GET"], "ops_per_s": round(both)}))' "$4"
}

# place SERVER_HOST CLIENT_HOST ADDR NAME: the shard and Redis on SERVER_HOST, their clients on
# CLIENT_HOST, both reaching ADDR.
place() {
  local sh=$1 ch=$2 addr=$3 name=$4
  local n bound
  local runs=() run
  for n in 1 $clients; do runs+=("$n:1"); done
  for n in $in_flight; do runs+=("1:$n"); done
  for run in "${runs[@]}"; do
    n=${run%%:*}
    rm -rf "$work/$name-shard"
    # Port 0: any free port (the last run's connections may still hold its port), read back from
    # the shard's "listening" line.
    start_in "$sh" "$work/$name-shard.out" "$B" --serve "$addr:0" --work "$work/$name-shard"
    bound=$(wait_line "$work/$name-shard.out" listening 120 | sed 's/.*"listening":"\([^"]*\)".*/\1/')
    on "$ch" "$B" --fetch "$bound" --seconds "$seconds" --clients "$n" --in-flight "${run##*:}" --work "$work/$name-client" |
      tag "$name"
    stop_all
    rm -f "$work/$name-shard.out"
  done
  start_in "$sh" "$work/$name-redis.out" redis-server --bind "$addr" --port 6399 --save '' \
    --appendonly no --protected-mode no --dir "$work"
  wait_line "$work/$name-redis.out" "Ready to accept" 30 > /dev/null
  redis_rate "$ch" "$addr" 6399 1 | tag "$name"
  redis_rate "$ch" "$addr" 6399 50 | tag "$name"
  stop_all
}

if [[ $what != loopback ]]; then
  hosts_begin 2
  place h1 h2 "$("$S" addr h1)" hosts_h1_h2
fi
if [[ $what != hosts ]]; then place local local 127.0.0.1 loopback; fi
/usr/bin/python3 - "$work/runs.jsonl" << 'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for place in dict.fromkeys(r["place"] for r in rows):
    red = {r["clients"]: r["ops_per_s"] for r in rows if r["place"] == place and r["bench"] == "redis_set_get"}
    for ps in (r for r in rows if r["place"] == place and r["bench"] == "ps_pull_push"):
        n = ps["clients"]
        peer = 1 if n == 1 else 50
        print(json.dumps({"bench": "ps_vs_redis", "place": place, "ps_clients": n, "in_flight": ps.get("in_flight", 1),
                          "ps_rows_per_s": round(ps["rows_per_s"]), "redis_clients": peer,
                          "redis_ops_per_s": red[peer], "ratio": round(ps["rows_per_s"] / red[peer], 2),
                          "target": 10}))
PY
