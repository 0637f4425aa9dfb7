#!/usr/bin/env bash
# `troupe run --submit`: the runner itself is a Slurm job on the control host (h1). It prints the
# Slurm job id and the job directory; `troupe status`, `scale` and `stop --job-dir` from this
# machine reach the runner on h1; stop ends the job (exit 3 in the runner's output) and leaves no
# Slurm job. A local-launcher job file is refused (exit 2).
# Usage: slurm_submit_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-submit
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

job_file sub 3 1500000 "worker_cpus = 2"
sed -i 's/^epochs = 2$/epochs = 20/' "$work/sub.toml"  # stopped long before it ends
"$B" run "$work/sub.toml" --submit --job-id sub > "$work/submit.out" 2> "$work/submit.err" ||
  fail "run --submit: $(cat "$work/submit.err")"
cat "$work/submit.out"
id=$(sed -n 's/^submitted the runner as Slurm job \([0-9]*\)$/\1/p' "$work/submit.out")
dir=$(sed -n 's/^job directory: //p' "$work/submit.out")
[[ -n $id && $dir == "$work/jobs/sub" ]] || fail "run --submit printed no job id / job directory"
[[ $(squeue -h -j "$id" -o %j) == "troupe-sub:runner" ]] || fail "the runner's job is not named troupe-sub:runner"
wait_for 60 bash -c "[[ \$(squeue -h -j $id -o %T) == RUNNING ]]" || fail "the runner's job does not run"
[[ $(squeue -h -j "$id" -o %N) == h1 ]] || fail "the runner does not run on the control host h1"
wait_for 90 trained sub 3 || fail "the workers did not train"
"$B" status --job-dir "$dir" > "$work/status" 2>&1 || fail "troupe status: $(cat "$work/status")"
grep -q 'tasks' "$work/status" || fail "troupe status shows no tasks: $(cat "$work/status")"
"$B" scale --workers 2 --job-dir "$dir" > "$work/scale" 2>&1 || fail "troupe scale: $(cat "$work/scale")"
# (Not "its Slurm job ended": a worker told to leave just after it joined can linger after its
# supervisor stopped, until its peers close their connections: a node_runtime teardown hang, open.)
wait_for 30 grep -q 'worker-2#0 down: left on SIGTERM' "$dir/logs/master.log" || fail "worker-2 did not leave on scale-down"
"$B" stop --job-dir "$dir" > "$work/stop" 2>&1 || fail "troupe stop: $(cat "$work/stop")"
wait_for 60 bash -c "[[ -z \$(squeue -h -j $id 2> /dev/null) ]]" || fail "the runner's job did not end"
grep -q '"status":"stopped"' "$dir/result.json" || fail "result.json: $(cat "$dir/result.json")"
wait_for 20 no_jobs_left sub || fail "Slurm jobs left behind: $(squeue -h -o '%i %j %T')"
grep -q 'stopped on request' "$dir.runner.out" || fail "the runner's output does not say it was stopped"

# --resume --submit: the stopped job continues under a new submitted runner (it was refused: "give a
# job file (not --resume)"; only a runner in the foreground could continue it).
done_before=$("$B" status --json --job-dir "$dir" 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tasks"]["done"])')
[[ -n $done_before ]] || fail "troupe status --json of the stopped job: no task count"
"$B" run --resume "$dir" --submit > "$work/resume.out" 2> "$work/resume.err" ||
  fail "run --resume --submit: $(cat "$work/resume.out" "$work/resume.err")"
cat "$work/resume.out"
rid=$(sed -n 's/^submitted the runner of .* as Slurm job \([0-9]*\)$/\1/p' "$work/resume.out")
[[ -n $rid ]] || fail "run --resume --submit printed no Slurm job id"
grep -q 'the runner resumed the job' "$work/resume.out" || fail "run --resume --submit: $(cat "$work/resume.out")"
# Again while that runner runs: refused at once (a second runner would be refused by the job's lock,
# which --submit read as "resumed").
"$B" run --resume "$dir/" --submit > /dev/null 2> "$work/twice.err"
rc=$?
[[ $rc == 2 ]] && grep -q "a runner still runs this job" "$work/twice.err" ||
  fail "--resume --submit of a running job: exit $rc $(cat "$work/twice.err")"
[[ $(squeue -h -j "$rid" -o %N) == h1 ]] || fail "the resumed runner does not run on the control host h1"
wait_for 90 bash -c "\"$B\" status --json --job-dir $dir 2>/dev/null | python3 -c 'import json,sys; \
  sys.exit(0 if json.load(sys.stdin)[\"tasks\"][\"done\"] > $done_before else 1)'" ||
  fail "the resumed job did not train on"
"$B" stop --job-dir "$dir" > "$work/stop2" 2>&1 || fail "troupe stop of the resumed job: $(cat "$work/stop2")"
wait_for 60 bash -c "[[ -z \$(squeue -h -j $rid 2> /dev/null) ]]" || fail "the resumed runner's job did not end"
wait_for 20 no_jobs_left sub || fail "Slurm jobs left behind after the resumed run: $(squeue -h -o '%i %j %T')"
# A stopped job's runner queued again (--resume --submit while the cluster is busy; here a held job in
# its record): troupe stop cancels it (it said the job was not running, and the runner ran later).
qid=$(sbatch --parsable --hold -p high -J troupe-sub:runner --wrap 'sleep 600')
printf '%s\n\n' "$qid" > "$dir.runner.job"
"$B" stop --job-dir "$dir" > "$work/stop3" 2>&1 || fail "stop of a queued resumed runner: $(cat "$work/stop3")"
grep -q "stopped job sub: its runner, Slurm job $qid (PENDING), was cancelled before it resumed it" "$work/stop3" ||
  fail "stop of a queued resumed runner: $(cat "$work/stop3")"
wait_for 20 bash -c "[[ \$(squeue -h -t all -j $qid -o %T 2> /dev/null) == CANCELLED || -z \$(squeue -h -j $qid 2> /dev/null) ]]" ||
  fail "the queued resumed runner $qid was not cancelled: $(squeue -h -j "$qid" -o %T)"
"$B" stop --job-dir "$dir" > /dev/null 2>&1 && fail "a second stop of the stopped job said it stopped it"
# A finished job is refused before anything is submitted.
echo '{"status": "finished"}' > "$work/finished.json"
cp "$dir/result.json" "$work/stopped.json" && cp "$work/finished.json" "$dir/result.json"
"$B" run --resume "$dir" --submit > /dev/null 2> "$work/fin.err"
rc=$?
cp "$work/stopped.json" "$dir/result.json"
[[ $rc == 2 ]] && grep -q "nothing to resume" "$work/fin.err" || fail "--resume --submit of a finished job: $rc $(cat "$work/fin.err")"

# A [job] root the hosts do not see (this machine's /tmp; each host has its own): the runner's job
# ends at once on h1 (FAILED); --submit waits for it and says so, exit 1 (it said "submitted", 0).
unshared=/tmp/troupe-submit-unshared-$$
"$B" run "$work/sub.toml" --submit --job-id lost --set "job.root=\"$unshared\"" > "$work/lost.out" 2> "$work/lost.err"
rc=$?
rm -rf "$unshared"
[[ $rc == 1 ]] || fail "--submit with an unshared root: exit $rc, expected 1: $(cat "$work/lost.out" "$work/lost.err")"
grep -q "filesystem the hosts share" "$work/lost.err" || fail "--submit with an unshared root: $(cat "$work/lost.err")"

# The same job submitted twice while its runner is queued (held: it never starts here): the second
# --submit is refused, exit 2, naming the queued runner; it queued a second runner, refused only at
# its start. Once that runner's job is cancelled, a submission goes ahead.
held=(--submit --job-id held --set 'cluster.sbatch_args=["--hold"]')
record="$work/jobs/held.runner.job"
"$B" run "$work/sub.toml" "${held[@]}" > "$work/held1.out" 2>&1 &
first=$!
wait_for 30 test -s "$record" || fail "--submit recorded no runner job in $record: $(cat "$work/held1.out")"
hid=$(head -1 "$record")
[[ $(squeue -h -j "$hid" -o %T) == PENDING ]] || fail "the held runner's job $hid is not PENDING"
"$B" run "$work/sub.toml" "${held[@]}" > /dev/null 2> "$work/held2.err"
rc=$?
[[ $rc == 2 ]] && grep -q "already submitted as Slurm job $hid (PENDING)" "$work/held2.err" ||
  fail "a second --submit of a queued runner: exit $rc $(cat "$work/held2.err")"
cat "$work/held2.err"
[[ $(squeue -h -o %j | grep -c '^troupe-held:runner$') == 1 ]] || fail "a second runner was queued: $(squeue -h -o '%i %j %T')"
# troupe status and stop reach the queued job by its record (they said "no such job directory", and
# only scancel reached it): status says queued, stop cancels its runner.
"$B" status --job-dir "$work/jobs/held" > "$work/held.status" 2>&1 || fail "status of a queued job: $(cat "$work/held.status")"
grep -q "job held  queued: its runner (troupe run --submit) is Slurm job $hid, PENDING" "$work/held.status" ||
  fail "status of a queued job: $(cat "$work/held.status")"
"$B" status --json --job-dir "$work/jobs/held" | python3 -c "import json,sys; j=json.load(sys.stdin); \
  sys.exit(0 if (j['state'], j['slurm_job'], j['slurm_state']) == ('queued', $hid, 'PENDING') else 1)" ||
  fail "status --json of a queued job: $("$B" status --json --job-dir "$work/jobs/held" 2>&1)"
"$B" scale --workers 2 --job-dir "$work/jobs/held" > /dev/null 2> "$work/held.scale"
rc=$?
[[ $rc == 2 ]] && grep -q "no such job directory: its runner, submitted as Slurm job $hid, is PENDING (troupe stop" "$work/held.scale" ||
  fail "scale of a queued job: exit $rc $(cat "$work/held.scale")"
"$B" stop --job-dir "$work/jobs/held" > "$work/held.stop" 2>&1 || fail "stop of a queued job: $(cat "$work/held.stop")"
grep -q "stopped job held: its runner, Slurm job $hid (PENDING), was cancelled before it started" "$work/held.stop" ||
  fail "stop of a queued job: $(cat "$work/held.stop")"
wait "$first"
rc=$?
[[ $rc == 1 ]] && grep -q "ended (CANCELLED) before it made" "$work/held1.out" ||
  fail "--submit of a runner cancelled while queued: exit $rc $(cat "$work/held1.out")"
"$B" status --job-dir "$work/jobs/held" > /dev/null 2> "$work/held.gone"
rc=$?
[[ $rc == 2 ]] && grep -q "submitted as Slurm job $hid, ended (CANCELLED) without it; its output: $work/jobs/held.runner.out" "$work/held.gone" ||
  fail "status of a job whose queued runner was cancelled: exit $rc $(cat "$work/held.gone")"
"$B" run "$work/sub.toml" "${held[@]}" > "$work/held3.out" 2>&1 &
third=$!
wait_for 30 bash -c "[[ -s $record && \$(head -1 $record) != $hid ]]" || fail "a --submit after the cancel was not taken: $(cat "$work/held3.out")"
scancel "$(head -1 "$record")"
wait "$third"
wait_for 20 no_jobs_left held || fail "Slurm jobs left behind by the held runners: $(squeue -h -o '%i %j %T')"

# A job file for the local launcher: nothing to submit to.
sed '/^\[cluster\]/,$d' "$work/sub.toml" > "$work/local.toml"
"$B" run "$work/local.toml" --submit > /dev/null 2> "$work/local.err"
rc=$?
[[ $rc == 2 ]] || fail "--submit with the local launcher: exit $rc, expected 2"
grep -q 'launcher = "slurm"' "$work/local.err" || fail "--submit with the local launcher: $(cat "$work/local.err")"
echo "PASS"
