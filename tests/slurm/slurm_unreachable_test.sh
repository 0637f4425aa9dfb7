#!/usr/bin/env bash
# Nodes whose Slurm job ends before troupe starts in it: the job fails after 3 such ends of one node
# in a row, within seconds (it said "master died 11 times in a minute (last: killed by signal 53
# (FAILED))" after a minute), and its final JSON, runner.log and timeline say what happened and what
# to check. 1. The job directory on /tmp, which the test cluster's hosts do not share: Slurm cannot
# open the node's log there (FAILED, JobLaunchFailure, ExitCode 0:53) and nothing is written where
# the runner looks. 2. The troupe binary on /tmp, so absent on the hosts: the batch shell cannot
# exec it and says so in the log (FAILED, NonZeroExitCode, ExitCode 127:0).
# Usage: slurm_unreachable_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-unreachable
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
private=$(mktemp -d /tmp/troupe-unreachable-XXXXXX)  # this machine's only: not on the hosts
trap 'cancel_ours > /dev/null 2>&1; rm -rf "$work" "$private"' EXIT

# expect_reason JOB PART...: the job's final JSON has each PART in its reason, and so do
# result.json, runner.log and the timeline's job_end.
expect_reason() {
  local job=$1 out reason part
  shift
  out=$(result "$job")
  reason=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["reason"])' "$out") || fail "$job: no final JSON"
  for part in "$@"; do
    [[ $reason == *"$part"* ]] || fail "$job: '$part' is not in the reason: $reason"
  done
  local dir
  dir=$(dirname "$(find "$work" "$private" -path "*/jobs/$job/result.json" -print -quit)")
  [[ -n $dir ]] || fail "$job: no result.json"
  grep -qF "$reason" "$dir/result.json" || fail "$job: result.json lacks the reason"
  grep -qF "$reason" "$dir/logs/runner.log" || fail "$job: runner.log lacks the reason"
  grep '"kind":"job_end"' "$dir/events.jsonl" | grep -qF "never came up" || fail "$job: the timeline's job_end lacks it"
  echo "$job: $reason"
}

# 1. The job directory where the hosts cannot see it.
deepfm_toml "$private" "$cache" unshared 2 8192 > "$work/unshared.toml"
printf '[cluster]\nlauncher = "slurm"\ncontrol_partition = "high"\nworker_partition = "low"\ncontrol_host = "h1"\n' >> "$work/unshared.toml"
start=$(date +%s)
timeout 120 "$B" run "$work/unshared.toml" --job-id unshared --quiet > "$work/unshared.out" 2> "$work/unshared.err"
rc=$?
[[ $rc == 1 ]] || fail "unshared: exit $rc, expected 1"
took=$(($(date +%s) - start))
[[ $took -lt 60 ]] || fail "unshared: it took $took s to give up"
expect_reason unshared "master never came up: its Slurm job ended FAILED (reason JobLaunchFailure, ExitCode 0:53) on h1" \
  "3 times in a row" "before troupe started in it: its log $private/jobs/unshared/logs/master.log was never written here" \
  "check: is the job directory on a filesystem the nodes share? is the troupe binary at $B on the node?"
no_jobs_left unshared || fail "unshared: Slurm jobs left behind"

# 2. The troupe binary where the hosts cannot see it (the job directory is shared).
cp "$B" "$private/troupe"
job_file nobin 2 8192
timeout 120 "$private/troupe" run "$work/nobin.toml" --job-id nobin --quiet > "$work/nobin.out" 2> "$work/nobin.err"
rc=$?
[[ $rc == 1 ]] || fail "nobin: exit $rc, expected 1"
expect_reason nobin "master never came up: its Slurm job ended FAILED (reason NonZeroExitCode, ExitCode 127:0) on h1" \
  "3 times in a row" "its output ($work/jobs/nobin/logs/master.log) ends: " "$private/troupe" \
  "is the troupe binary at $private/troupe on the node?"
no_jobs_left nobin || fail "nobin: Slurm jobs left behind"
echo "PASS"
