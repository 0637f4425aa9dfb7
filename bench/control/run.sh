#!/usr/bin/env bash
# The control plane at N workers against one master, and the same task queue in etcd, in one run
# (issue 29). Usage: bench/control/run.sh [BUILD_DIR] [OUT_DIR]
#   N (default "64 256 1000 4000"), SECONDS_PER_N (measured window per N, default 5), TASK_MS (default
#   0: a worker reports at once and leases again; the master's maximum rate), ETCD (default
#   /usr/bin/etcd), ETCD_MAX (default 1000): above it etcd is not run (at 1,000 clients its
#   transactions time out; at 4,000 a phase did not end in 8 minutes), IO_THREADS (default 2): the
#   simulated workers' endpoints share that many io threads (0: one each, a thread per worker),
#   HEARTBEAT_ABOVE (default 1000): above it heartbeats every 1 s, timeout 4 s (the setting a job of
#   thousands of workers uses; see docs/job.md, "Scale").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/release}
out=${2:-$here/../../docs/figures/control}
mkdir -p "$out"
work=$(mktemp -d /tmp/control-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
: > "$out/control.json"
for n in ${N:-64 256 1000 4000}; do
  flags=()
  [[ $n -gt ${ETCD_MAX:-1000} ]] && flags+=(--no-etcd)
  [[ $n -gt ${HEARTBEAT_ABOVE:-1000} ]] && flags+=(--heartbeat-ms 1000)
  "$build/bench/control/control_bench" "${flags[@]}" --troupe "$build/troupe" --workers "$n" \
    --seconds "${SECONDS_PER_N:-5}" --task-ms "${TASK_MS:-0}" --io-threads "${IO_THREADS:-2}" \
    --etcd "${ETCD:-/usr/bin/etcd}" --work "$work" ${EXTRA:-} | tee -a "$out/control.json"
done
echo "load during the run: $(cat /proc/loadavg)" >&2
/usr/bin/python3 "$here/plots.py" "$out/control.json" --out "$out"
