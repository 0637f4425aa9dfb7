#!/usr/bin/env bash
# A DeepFM async-PS job across scripts/hosts.sh namespaces against the same job on one host, same
# run, alternating (issue 19's benchmarks):
#   e2e     4 workers + 2 PS shards: all on this host, vs PS shards on h1 and the workers on h2-h4
#           (the master and the only record store here; workers read the store through /var/tmp,
#           shared by the hosts, or served: see remote)
#   remote  1 worker: on this host reading the local store, vs on h2 reading served records
#           ([data] serve = "always": the master's record server over the veth link, prefetched),
#           vs on h2 reading the store itself (serve = "never": /var/tmp is shared by the hosts),
#           PS shards on h1 in both h2 runs: the last pair differs only in where records come from
# Prints one JSON line per run (samples/s = samples trained / wall seconds, test AUC) and the
# medians. Root and a release build needed. Usage: bench/job/hosts_job.sh [RUNS] [ROWS]
set -euo pipefail
cd "$(dirname "$0")/../.."
here=$(pwd)
runs=${1:-3}
rows=${2:-400000}
S=$here/scripts/hosts.sh
B=$here/build/release/troupe
work=/var/tmp/troupe-hosts-job-$$
cache=/var/tmp/troupe-multihost-datasets
mkdir -p "$work" "$cache"
trap '"$S" down > /dev/null 2>&1; rm -rf "$work"' EXIT
"$S" up 4 > /dev/null
bridge=$("$S" addr h1 | sed 's/\.[0-9]*$/.1/')
source "$here/tests/common/job_files.sh"

job() {  # job NAME WORKERS SERVE HOSTS...: the job file on stdout
  local name=$1 workers=$2 serve=$3
  shift 3
  deepfm_toml "$work" "$cache" "$name" "$workers" "$rows" | sed 's/^epochs = 2/epochs = 1/'
  echo "serve = \"$serve\""
  if [[ $# -gt 0 ]]; then
    local list
    list=$(printf '"%s", ' "$@")
    printf '[cluster]\nhosts = [%s]\nhost_command = "%s exec {host}"\nadvertise = "%s"\n' "${list%, }" "$S" "$bridge"
  fi
}
one() {  # one KIND MODE NAME: runs the job file $work/NAME.toml, prints its JSON line
  local line
  line=$("$B" run "$work/$3.toml" --quiet --job-id "$3" 2> "$work/$3.err" | tail -1)
  /usr/bin/python3 -c 'import json,sys; j=json.loads(sys.argv[3]); print(json.dumps({"bench": sys.argv[1], "mode": sys.argv[2], "samples_per_s": round(j["samples_trained"]/j["wall_seconds"]), "wall_s": round(j["wall_seconds"], 2), "auc": round(j.get("test_auc", 0), 4), "tasks_done": j["tasks_done"], "requeued": j["tasks_requeued"]}))' "$1" "$2" "$line"
}
for i in $(seq "$runs"); do
  job "e1-$i" 4 never > "$work/e1-$i.toml"
  one e2e one_host "e1-$i"
  job "e4-$i" 4 never h1:2 h2:2 h3:1 h4:1 > "$work/e4-$i.toml"
  one e2e four_hosts "e4-$i"
  job "rl-$i" 1 never > "$work/rl-$i.toml"
  one remote local_worker "rl-$i"
  job "rr-$i" 1 always h1:2 h2:1 > "$work/rr-$i.toml"
  one remote remote_worker "rr-$i"
  job "rn-$i" 1 never h1:2 h2:1 > "$work/rn-$i.toml"
  one remote same_hosts_local_store "rn-$i"
done | tee "$work/runs.jsonl"
/usr/bin/python3 - "$work/runs.jsonl" << 'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
med = lambda b, m: statistics.median(r["samples_per_s"] for r in rows if r["bench"] == b and r["mode"] == m)
for b, a, c in (("e2e", "four_hosts", "one_host"), ("remote", "remote_worker", "local_worker"),
                ("remote", "remote_worker", "same_hosts_local_store")):
    print(json.dumps({"bench": b, a: med(b, a), c: med(b, c), "ratio": round(med(b, a) / med(b, c), 3)}))
PY
