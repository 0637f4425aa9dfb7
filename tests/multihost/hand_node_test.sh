#!/usr/bin/env bash
# Nodes started by hand on other hosts join a running job like launched ones: a DeepFM job with
# its master here and its PS shards and one worker on h1 (scripts/hosts.sh); workers started by
# hand in h2 and h3 with `troupe node --join MASTER --advertise <their address>` become members,
# train tasks, and stop by themselves when the job is over; the job finishes with every record
# trained once. Their hosts lack the record store (their --train/--test name directories of their
# private /tmp that do not exist), so with [data] serve = "auto" they train on records served by
# the master; their spill cache ([data] spill_dir) is a read-only filesystem on h2 and a full one
# on h3: a warning naming it, and training goes on. Before them, a wrong --join (nobody there) and
# a wrong --advertise (not h2's address) fail with errors naming the flag and the address. With them
# the job holds max_workers (3): `troupe scale --workers 3` launches none (it launched two the master
# refused, relaunched until the job failed) and says why, and a third worker started by hand is
# refused by the master: it exits with code 75 (no worker slot), naming why. The job is paced
# (max_samples_per_s) so that it still runs then.
# Usage: hand_node_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=hand-node HOSTS=3 FAIL_LOGS='hand*.log'
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"
h2=$("$S" addr h2)
h3=$("$S" addr h3)
# The spill caches of h2 (read-only) and h3 (64 KiB: full at once), in their private /tmp.
"$S" exec h2 sh -c 'mkdir -p /tmp/troupe-spill && mount -t tmpfs -o ro tmpfs /tmp/troupe-spill' || fail "h2 cache"
"$S" exec h3 sh -c 'mkdir -p /tmp/troupe-spill && mount -t tmpfs -o size=64k tmpfs /tmp/troupe-spill' || fail "h3 cache"

rows=1000000
deepfm_toml "$work" "$cache" hand 1 $rows > "$work/hand.toml"
cat >> "$work/hand.toml" << TOML
serve = "auto"
cache_mb = 0
spill_mb = 64
spill_dir = "/tmp/troupe-spill"
TOML
hosts_section h1:3 >> "$work/hand.toml"
sed -i 's/^max_workers = 8$/max_workers = 3/; s/^\[train\]$/[train]\nmax_samples_per_s = 300000/' "$work/hand.toml"
grep -q '^max_samples_per_s = 300000$' "$work/hand.toml" || fail "max_samples_per_s not set"
grep -q '^max_workers = 3$' "$work/hand.toml" || fail "max_workers not set"
"$B" run "$work/hand.toml" --job-id hand > "$work/hand.out" 2> "$work/hand.err" &
runner=$!
job=$work/jobs/hand
status() { "$B" status --json --job-dir "$job" 2> /dev/null; }
for _ in $(seq 1 600); do
  [[ $(status | sed -n 's/.*"done":\([0-9]*\).*/\1/p' | head -1) -ge 10 ]] 2> /dev/null && break
  sleep 0.1
done
# The master's address, and the record stores the launched worker was given.
master=$(python3 -c 'import json,sys; print([n["address"] for n in json.load(open(sys.argv[1]))["nodes"] if n["name"] == "master"][0])' "$job/nodes.json")
[[ $master == "$bridge":* ]] || fail "master address '$master'"
stores=$(grep -m1 -o -- "--train [^ ]* --test [^ ]*" "$job/logs/worker-0.log") || fail "no --train/--test in worker-0's log"
node() {  # node HOST LOG ARGS...: a worker started by hand in HOST
  local host=$1 log=$2
  shift 2
  "$S" exec "$host" "$B" node --job-dir "$job" --role worker "$@" > "$work/$log" 2>&1
}
away="--train /tmp/no-store/train --test /tmp/no-store/test"  # not on these hosts

# Nobody at --join: an error naming the flag and the address, after --connect-timeout.
node h2 hand-badjoin.log $stores --index 6 --join 10.78.0.99:7000 --advertise "$h2" --connect-timeout 2 &&
  fail "a worker joined nobody"
grep -q "cannot reach the master at --join 10.78.0.99:7000 within 2 s" "$work/hand-badjoin.log" ||
  fail "bad --join: $(tail -3 "$work/hand-badjoin.log")"
# Not an address of h2.
node h2 hand-badadv.log $stores --index 6 --join "$master" --advertise 10.78.0.99
[[ $? == 2 ]] || fail "a worker advertised another host's address"
grep -q -- "--advertise 10.78.0.99" "$work/hand-badadv.log" || fail "bad --advertise: $(tail -3 "$work/hand-badadv.log")"

node h2 hand7.log $away --index 7 --join "$master" --advertise "$h2" &
hand7=$!
node h3 hand8.log $away --index 8 --join "$master" --advertise "$h3" &
hand8=$!
for _ in $(seq 1 600); do
  s=$(status)
  [[ $s == *'"worker-7#0"'* && $s == *'"worker-8#0"'* ]] && break
  sleep 0.1
done
[[ $s == *'"worker-7#0"'* && $s == *'"worker-8#0"'* ]] || fail "the workers started by hand are not members"
for _ in $(seq 1 50); do  # the runner counts them at its next look at the membership
  scaled=$("$B" scale --workers 3 --job-dir "$job" 2>&1)
  [[ $scaled == *"joined by hand"* ]] && break
  sleep 0.2
done
[[ $scaled == *"workers: 1 (asked 3: clamped to [1, 1]: max_workers 3 less 2 workers joined by hand)"* ]] ||
  fail "scale to max_workers with two hand workers: $scaled"
echo "$scaled"
node h2 hand9.log $away --index 9 --join "$master" --advertise "$h2"
rc=$?
[[ $rc == 75 ]] || fail "a worker beyond max_workers: exit $rc, expected 75: $(tail -3 "$work/hand9.log")"
grep -q "worker-9#0: the master has no worker slot for it" "$work/hand9.log" ||
  fail "worker-9 does not say why: $(tail -3 "$work/hand9.log")"
wait "$runner" || fail "the job failed (exit $?)"
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" "$work/hand.out" | tail -1; }
[[ $(field tasks_failed) == 0 ]] || fail "failed tasks"
[[ $(field records_done) == $((rows * 2)) ]] || fail "records_done $(field records_done), expected $((rows * 2))"
for p in $hand7 $hand8; do
  for _ in $(seq 1 300); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
  kill -0 "$p" 2> /dev/null && fail "a worker started by hand did not stop after the job"
  wait "$p" || fail "a worker started by hand exited $?"
done
for w in 7:h2:$h2 8:h3:$h3; do
  IFS=: read -r i host addr <<< "$w"
  log=$work/hand$i.log
  steps=$(sed -n "s/.*worker-$i#0: training loop over after \([0-9]*\) steps.*/\1/p" "$log")
  grep -q "worker-$i#0 (worker) up at $addr:" "$log" || fail "worker-$i is not at $addr"
  [[ -n $steps && $steps -gt 0 ]] || fail "worker-$i (started by hand on $host) trained no step"
  grep -q "reading records from the master's record server" "$log" || fail "worker-$i did not read served records"
  grep -Eq "served records: spill cache /tmp/troupe-spill/[0-9a-f]+ (off|is full)" "$log" ||
    fail "worker-$i: no warning about its spill cache"
  echo "worker-$i on $host: $steps steps; $(grep -Eo "spill cache .*" "$log" | head -1 | cut -c1-150)"
  grep -o "served records: [0-9]* ranges fetched.*" "$log" | tail -1
done
# Once the job is over, a worker started by hand says so at once (it dialled the master for
# --connect-timeout, then said it could not reach it).
node h2 hand-late.log $away --index 9 --join "$master" --advertise "$h2"
rc=$?
[[ $rc == 1 ]] || fail "a worker started by hand after the job: exit $rc: $(tail -2 "$work/hand-late.log")"
grep -q "job $job is over (its result.json is written, its runner gone): nothing to join" "$work/hand-late.log" ||
  fail "a worker started by hand after the job: $(tail -2 "$work/hand-late.log")"
echo "job: $(tail -1 "$work/hand.out")"
echo "hand_node_test: ok"
