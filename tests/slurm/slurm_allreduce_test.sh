#!/usr/bin/env bash
# An MLP allreduce job with launcher = "slurm" on the Slurm test cluster: 4 workers, each a Slurm job
# of its own (2 CPUs: at most two on a host), so the ring mixes shared-memory links (workers on one
# host) and TCP links (across hosts). Every task is done once and the test accuracy is within 0.015
# of the same job run on this machine alone (tests/common/job_files.sh: mlp_toml).
# Usage: slurm_allreduce_test.sh TROUPE_BINARY.
# Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-allreduce
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

mlp_job() { mlp_toml "$work" "$cache" "$1"; }
alone_and_spread mlp_job
echo "spread: workers on $hosts host(s); ring links: $(grep -ho '([a-zA-Z ]*), linked' "$logs"/worker-*.log | sort | uniq -c | tr '\n' ';')"
wait_for 20 no_jobs_left spread || fail "Slurm jobs left behind: $(squeue -h -o '%i %j %T')"
echo "alone: accuracy $a; on Slurm ($hosts hosts): $b"
echo "PASS"
