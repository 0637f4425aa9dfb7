#!/usr/bin/env bash
# Ring allreduce across hosts (scripts/hosts.sh namespaces, one rank per host): troupe's TCP ring
# links vs gloo (torch.distributed, same hosts, same run) vs iperf3 between h1 and h2, at 2 and
# 4 hosts, 1 MB and 64 MB, with the links unlimited, at 10 Gbit/s and at 1 Gbit/s (tc tbf on every
# host). Root, a release build and `scripts/install-deps.sh --bench` (PyTorch, iperf3) needed.
# iperf3 runs one way (h1->h2) and with --bidir (both ways at once, as a 2-rank ring sends: the sum
# and each direction). Prints JSON lines; every line names the link limit.
# Usage: bench/collective/hosts_run.sh [LIMITS...]; SIZES="2 4" and MBS="1 64" in the environment
# pick the ring sizes and megabytes, REPS=K runs each troupe/gloo pair K times in turn (the machine's
# other load moves single runs a lot), TROUPE_ARGS adds flags to allreduce_tcp_rank, BASELINE=PATH
# runs another build's allreduce_tcp_rank (under this repository) in turn too, tagged "baseline",
# with BASELINE_ARGS as its flags.
set -euo pipefail
cd "$(dirname "$0")/../.."
S=scripts/hosts.sh
B=$(realpath build/release/bench/collective/allreduce_tcp_rank)
G=$(realpath bench/collective/gloo_rank.py)
limits=("$@")
[[ ${#limits[@]} -eq 0 ]] && limits=(none 10gbit 1gbit)
trap '"$S" down > /dev/null 2>&1' EXIT
"$S" up 4 > /dev/null
port=29700
tag() { sed "s/^{/{\"limit\":\"$1\",/"; }
for limit in "${limits[@]}"; do
  for h in h1 h2 h3 h4; do
    if [[ $limit == none ]]; then "$S" limit $h off; else "$S" limit $h "$limit"; fi
  done
  "$S" exec h2 iperf3 -s -1 -B "$("$S" addr h2)" -p 5201 > /dev/null 2>&1 &
  sleep 0.3
  "$S" exec h1 iperf3 -c "$("$S" addr h2)" -p 5201 -t 3 -J |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin); e=d["end"]["sum_received"]; print(json.dumps({"bench":"iperf3_h1_h2","GBps":round(e["bits_per_second"]/8e9,3)}))' | tag "$limit"
  wait
  "$S" exec h2 iperf3 -s -1 -B "$("$S" addr h2)" -p 5201 > /dev/null 2>&1 &
  sleep 0.3
  "$S" exec h1 iperf3 -c "$("$S" addr h2)" -p 5201 -t 3 --bidir -J |
    /usr/bin/python3 -c 'import json,sys; d=json.load(sys.stdin)["end"]; f=d["sum_received"]["bits_per_second"]/8e9; r=d["sum_received_bidir_reverse"]["bits_per_second"]/8e9; print(json.dumps({"bench":"iperf3_bidir_h1_h2","GBps_sum":round(f+r,3),"GBps_h1_h2":round(f,3),"GBps_h2_h1":round(r,3)}))' | tag "$limit"
  wait
  for size in ${SIZES:-2 4}; do
    for mb in ${MBS:-1 64}; do
      iters=$([[ $mb == 1 ]] && echo 100 || echo 10)
      [[ $limit == 1gbit && $mb == 64 ]] && iters=5
      for rep in $(seq "${REPS:-1}"); do
        port=$((port + 1))
        for r in $(seq 0 $((size - 1))); do
          h=h$((r + 1)); nx=h$(((r + 1) % size + 1))
          "$S" exec $h "$B" --rank $r --size $size --listen "$("$S" addr $h):$port" \
            --next "$("$S" addr $nx):$port" --mb $mb --iters $iters --timeout-ms 600000 ${TROUPE_ARGS:-} | tag "$limit" &
        done
        wait
        if [[ -n ${BASELINE:-} ]]; then
          port=$((port + 1))
          for r in $(seq 0 $((size - 1))); do
            h=h$((r + 1)); nx=h$(((r + 1) % size + 1))
            "$S" exec $h "$(realpath "$BASELINE")" --rank $r --size $size --listen "$("$S" addr $h):$port" \
              --next "$("$S" addr $nx):$port" --mb $mb --iters $iters --timeout-ms 600000 ${BASELINE_ARGS:-} | tag "$limit" |
              sed 's/^{/{"variant":"baseline",/' &
          done
          wait
        fi
        port=$((port + 1))
        for r in $(seq 0 $((size - 1))); do
          "$S" exec h$((r + 1)) /usr/bin/python3 "$G" $r $size "$("$S" addr h1)" $port $mb $iters | tag "$limit" &
        done
        wait
      done
    done
  done
done
