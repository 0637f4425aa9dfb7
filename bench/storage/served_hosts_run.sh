#!/usr/bin/env bash
# Served records across hosts (issue 19): the record server (served_records_bench --serve, the
# master's record_server on a transport endpoint) on h1, one worker's fetcher on h2
# (--fetch: cold, no cache), against iperf3 from h1 to h2, a local LMDB scan of the same tasks
# on h2 (the store is under /var/tmp, which the hosts share) and a second server on h1 that copies
# every record into its replies (--copy), same run; then the one-process
# loopback run on this host. Prints JSON lines (each with the load average) and a summary.
# Root, a release build (served_records_bench), iperf3 and the Fashion-MNIST dataset needed. The
# hosts are shared: run under flock -o /tmp/troupe-hosts.lock.
# Usage: bench/storage/served_hosts_run.sh [REPEAT]
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
S=$here/scripts/hosts.sh
B=$here/build/release/bench/storage/served_records_bench
repeat=${1:-3}
work=/var/tmp/troupe-served-hosts-$$
mkdir -p "$work"
source "$here/bench/common/hosts_lib.sh"
trap 'hosts_end; rm -rf "$work"' EXIT

hosts_begin 2
a1=$("$S" addr h1)
start_in h1 "$work/server.out" "$B" --serve "$a1:29741" "$work/data"
wait_line "$work/server.out" listening 300 > /dev/null
# The same server copying every record into its replies (the record server before it sent records
# straight from the map), for the comparison in the same run.
start_in h1 "$work/server-copy.out" "$B" --serve "$a1:29742" --copy "$work/data"
wait_line "$work/server-copy.out" listening 300 > /dev/null
for r in $(seq "$repeat"); do
  echo "{\"bench\":\"iperf3_h1_h2\",\"GBps\":$(iperf3_gbps h1 h2)}" | tag hosts_h1_h2
  on h2 "$B" --fetch "$a1:29741" --local "$work/data/train" --repeat 1 | tag hosts_h1_h2
  on h2 "$B" --fetch "$a1:29742" --repeat 1 | sed 's/"bench":"served_records"/"bench":"served_records_copied"/' | tag hosts_h1_h2
done
stop_all
"$B" "$work/data" --repeat "$repeat" | tag loopback
/usr/bin/python3 - "$work/runs.jsonl" << 'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda k, place, b="served_records": statistics.median(r[k] for r in rows if r["place"] == place and r["bench"] == b)
for place in ("hosts_h1_h2", "loopback"):
    out = {"bench": "served_records_summary", "place": place, "served_mb_per_s": round(med("served_mb_per_s", place)),
           "served_records_per_s": round(med("served_records_per_s", place)),
           "one_in_flight_mb_per_s": round(med("one_in_flight_mb_per_s", place)),
           "local_scan_mb_per_s": round(med("peer_mb_per_s", place)),
           "ratio_vs_local_scan": round(med("served_mb_per_s", place) / med("peer_mb_per_s", place), 2)}
    if place == "hosts_h1_h2":
        g = med("GBps", place, "iperf3_h1_h2") * 1000
        out.update({"iperf3_mb_per_s": round(g), "ratio_vs_iperf3": round(med("served_mb_per_s", place) / g, 2), "target": 0.7,
                    "copied_server_mb_per_s": round(med("served_mb_per_s", place, "served_records_copied"))})
    print(json.dumps(out))
PY
