#!/usr/bin/env bash
# Time from a stop to the runner's exit, N runs of one job while it trains: the DeepFM async-PS job
# (tests/common/job_files.sh: deepfm_toml, 2 workers, 2 PS shards) or the MLP allreduce job
# (mlp_toml, 4 workers). Each run waits until 2 tasks are done, stops the job and prints one JSON
# line: the runner's exit code, the seconds from the stop to its exit, the node logs in which a
# supervisor gave up on an actor ("did not stop within"), the timeline's `died` events; then a
# summary (median and max). The stop is `troupe stop`, or with `dashboard` a POST to a `troupe
# dashboard`'s stop API (with the job's token), whose answer is timed too (`answer_s`, curl's).
# Job directories are kept under the printed work directory.
# Usage: bench/job/stop_bench.sh TROUPE_BINARY deepfm|mlp N [dashboard]
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
B=$(realpath "$1")
job=$2
n=$3
via=${4:-troupe}
work=/var/tmp/troupe-stop-bench-$$
cache=/var/tmp/troupe-test-datasets
mkdir -p "$work/jobs" "$cache"
source "$here/tests/common/job_files.sh"
if [[ $via == dashboard ]]; then
  port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$B" dashboard --root "$work/jobs" --listen "127.0.0.1:$port" > "$work/dashboard.log" 2>&1 &
  dash=$!
  trap 'kill "$dash"' EXIT
  until curl -s -o /dev/null "http://127.0.0.1:$port/LICENSE.uplot.txt"; do sleep 0.1; done
fi
times=()
for i in $(seq 1 "$n"); do
  name=$job$i
  case $job in
    deepfm) deepfm_toml "$work" "$cache" "$name" 2 600000 > "$work/$name.toml" ;;
    mlp) mlp_toml "$work" "$cache" "$name" > "$work/$name.toml" ;;
    *) echo "job: deepfm or mlp" >&2; exit 2 ;;
  esac
  dir=$work/jobs/$name
  "$B" run "$work/$name.toml" --job-id "$name" --quiet > "$work/$name.out" 2> "$work/$name.err" &
  pid=$!
  wait_done_tasks "$B" "$dir" 2 0.1
  answer=""
  t0=$(date +%s.%N)
  if [[ $via == dashboard ]]; then
    answer=$(curl -s -o "$work/$name.stop" -w ', "http": %{http_code}, "answer_s": %{time_total}' -X POST \
      -H "Authorization: Bearer $(cat "$dir/token")" "http://127.0.0.1:$port/api/jobs/$name/stop")
  else
    "$B" stop --job-dir "$dir" > "$work/$name.stop" 2>&1
  fi
  wait "$pid"
  rc=$?
  t1=$(date +%s.%N)
  s=$(echo "$t1 - $t0" | bc)
  times+=("$s")
  stuck=$(grep -l "did not stop within" "$dir"/logs/*.log 2> /dev/null | xargs -r -n1 basename | paste -sd, -)
  died=$(grep -c '"kind":"died"' "$dir/events.jsonl")
  printf '{"job": "%s", "run": %d, "exit_code": %d%s, "stop_to_exit_s": %.3f, "stuck": "%s", "died": %d}\n' \
    "$job" "$i" "$rc" "$answer" "$s" "$stuck" "$died"
done
printf '%s\n' "${times[@]}" | /usr/bin/python3 -c '
import json, statistics, sys
t = [float(x) for x in sys.stdin.read().split()]
print(json.dumps({"job": sys.argv[1], "runs": len(t), "median_s": round(statistics.median(t), 3),
                  "max_s": round(max(t), 3), "work": sys.argv[2]}))' "$job" "$work"
