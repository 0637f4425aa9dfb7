#!/usr/bin/env bash
# Training samples/s of a job whose workers read served records ([data] serve = "always": the
# master's record server over the transport, prefetched at lease) against the same job reading
# the local store, alternating runs on this host (loopback). Prints one line per run and the
# medians. Usage: bench/job/served_vs_local.sh [RUNS] [JOB_TOML]  (release build)
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
job=${2:-examples/deepfm_synthetic.toml}
work=${TMPDIR:-/tmp}/troupe-served-vs-local
mkdir -p "$work"
for i in $(seq "$runs"); do
  for serve in never always; do  # never: the local store
    line=$(build/release/troupe run "$job" --quiet --set "job.root=\"$work\"" \
      --set "data.serve=\"$serve\"" --set train.epochs=1 --job-id "svl-$serve-$i-$$" 2>/dev/null | tail -1)
    python3 -c 'import json,sys; j=json.loads(sys.argv[2]); print(sys.argv[1], round(j["samples_trained"]/j["wall_seconds"]), j["wall_seconds"], j.get("test_auc", j.get("test_accuracy")), j["tasks_done"], j["tasks_requeued"])' "$serve" "$line"
  done
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
med = {s: statistics.median(float(r[1]) for r in rows if r[0] == s) for s in ("never", "always")}
print("median samples/s: local %d, served %d, served/local %.3f" % (med["never"], med["always"], med["always"] / med["never"]))
PY
