#!/usr/bin/env bash
# The control plane at N workers against one master, and the same task queue in etcd, in one run
# (issue 29). Usage: bench/control/run.sh [BUILD_DIR] [OUT_DIR]
#   N (default "64 256 1000 4000"), SECONDS (measured window per N, default 5), TASK_MS (default 0:
#   a worker reports at once and leases again; the master's maximum rate), ETCD (default /usr/bin/etcd),
#   JOIN_MAX (default 1000): above it the simulated workers do not join the membership (--no-join:
#   one full-view broadcast to N members is N x N members; see docs/job.md, "Scale").
# Writes OUT_DIR/control.json (one object per phase) and, with /usr/bin/python3 and matplotlib,
# OUT_DIR/control.png and control_plot.json beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/release}
out=${2:-$here/../../docs/figures/control}
mkdir -p "$out"
work=$(mktemp -d /tmp/control-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
: > "$out/control.json"
for n in ${N:-64 256 1000 4000}; do
  join=""
  [[ $n -gt ${JOIN_MAX:-1000} ]] && join=--no-join
  "$build/bench/control/control_bench" $join --troupe "$build/troupe" --workers "$n" --seconds "${SECONDS_PER_N:-5}" \
    --task-ms "${TASK_MS:-0}" --etcd "${ETCD:-/usr/bin/etcd}" --work "$work" ${EXTRA:-} | tee -a "$out/control.json"
done
echo "load during the run: $(cat /proc/loadavg)" >&2
/usr/bin/python3 "$here/plots.py" "$out/control.json" --out "$out"
