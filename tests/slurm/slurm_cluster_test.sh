#!/usr/bin/env bash
# scripts/slurm-cluster.sh makes a real Slurm cluster: 4 nodes, each a host of scripts/hosts.sh
# (own hostname and address); jobs run where Slurm places them and reach each other over TCP; a
# high-priority job preempts low-priority ones, which get SIGTERM, requeue themselves and run again
# once it ends (the grow-back pattern troupe's Slurm launcher builds on). Exit 77 (ctest: skipped)
# without root, saying why. Leaves the cluster down.
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
C="$here/scripts/slurm-cluster.sh"
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: the Slurm test cluster needs root (namespaces, daemons)"; exit 77; fi
out=$(mktemp -d /var/tmp/troupe-slurm-test.XXXXXX)
fail() { echo "FAIL: $*"; squeue; for f in "$out"/*.out; do echo "== $f"; cat "$f"; done; "$C" down > /dev/null 2>&1; exit 1; }
trap '"$C" down > /dev/null 2>&1; rm -rf "$out"' EXIT
export TROUPE_SLURM_DBD=${TROUPE_SLURM_DBD:-0}   # sacct is not needed here: start faster

"$C" up || fail "up"
[[ $(srun -p low -w h3 -n1 hostname) == h3 ]] || fail "srun -w h3 ran elsewhere"

# A TCP server placed on h1, a client on h4 that dials it by name.
srun -p low -w h1 -n1 /usr/bin/python3 -c '
import socket; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7021)); s.listen(); c, a = s.accept(); c.sendall(a[0].encode())' &
got=""
for _ in $(seq 1 40); do
  got=$(srun -p low -w h4 -n1 /usr/bin/python3 -c '
import socket
try: print(socket.create_connection(("h1", 7021), timeout=1).recv(64).decode())
except OSError as e: print("error", e)')
  [[ "$got" != error* ]] && break
  sleep 0.25
done
wait
[[ "$got" == 10.78.0.14 ]] || fail "h4 -> h1 over TCP: got '$got'"

# 16 one-CPU victims fill the cluster; on a preemption SIGTERM they requeue themselves.
cat > "$out/victim.sh" <<'EOS'
#!/bin/bash
echo "start job=$SLURM_JOB_ID restart=${SLURM_RESTART_COUNT:-0}"
on_term() {
  pt=$(scontrol show job "$SLURM_JOB_ID" | grep -o 'PreemptTime=[^ ]*')
  if [[ -n "$pt" && "$pt" != "PreemptTime=None" ]]; then echo "preempted job=$SLURM_JOB_ID"; scontrol requeue "$SLURM_JOB_ID"; fi
  exit 0
}
trap on_term TERM
while true; do sleep 1 & wait $!; done
EOS
total=$(sinfo -h -p low -o %C | cut -d/ -f4)
for _ in $(seq 1 "$total"); do
  sbatch -p low -n1 --requeue --open-mode=append --signal=B:TERM -o "$out/v-%j.out" "$out/victim.sh" > /dev/null || fail "sbatch victim"
done
for _ in $(seq 1 120); do [[ $(cat "$out"/v-*.out 2> /dev/null | grep -c '^start') -ge $total ]] && break; sleep 0.5; done
[[ $(cat "$out"/v-*.out | grep -c '^start') -ge $total ]] || fail "not all $total victims started"

# A 4-CPU high-priority job on one node must preempt 4 victims and run.
sbatch -p high -N1 -n4 -o "$out/high.out" --wrap 'echo hstart; sleep 3; echo hend' > /dev/null || fail "sbatch high"
for _ in $(seq 1 120); do grep -q hend "$out/high.out" 2> /dev/null && break; sleep 0.5; done
grep -q hend "$out/high.out" || fail "the high-priority job did not run within 60 s"
preempted=$(cat "$out"/v-*.out | grep -c '^preempted')
[[ $preempted -ge 4 ]] || fail "expected at least 4 victims preempted, saw $preempted"
# The victims come back (after cred_expire) and run again.
for _ in $(seq 1 120); do [[ $(cat "$out"/v-*.out | grep -c 'restart=1') -ge $preempted ]] && break; sleep 0.5; done
back=$(cat "$out"/v-*.out | grep -c 'restart=1')
[[ $back -ge $preempted ]] || fail "only $back of $preempted preempted victims ran again"
echo "slurm_cluster_test: ok ($preempted victims preempted, $back back)"
