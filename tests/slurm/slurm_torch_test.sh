#!/usr/bin/env bash
# A user's PyTorch module (TorchScript, docs/models.md) on the Slurm test cluster: the MLP allreduce
# job of slurm_allreduce_test.sh with the same MLP written in PyTorch, 4 workers each a Slurm job of
# its own, each loading the TorchScript plugin and the module on its host. Every task is done once
# and the accuracy is within 0.01 of the same job on this machine alone.
# Usage: slurm_torch_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-torch
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

/usr/bin/python3 - "$work/mlp.pt" << 'PY' || fail "scripting the module"
import sys, torch
from torch import nn
torch.manual_seed(1)
torch.jit.script(nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10))).save(sys.argv[1])
PY
mlp_file() {  # mlp_file NAME CLUSTER_SECTION
  { mlp_toml "$work" "$cache" "$1" | sed "s|^type = \"mlp\"|type = \"torchscript\"\npath = \"$work/mlp.pt\"|; /^hidden = /d"
    echo "$2"; } > "$work/$1.toml"
}
slurm='[cluster]
launcher = "slurm"
control_partition = "high"
worker_partition = "low"
control_host = "h1"
worker_cpus = 2'
for j in alone spread; do
  if [[ $j == alone ]]; then mlp_file $j ""; else mlp_file $j "$slurm"; fi
  "$B" run "$work/$j.toml" --job-id $j --quiet > "$work/$j.out" 2> "$work/$j.err" || fail "$j: the job failed"
done
for j in alone spread; do
  [[ $(field $j records_done) == 240000 && $(field $j tasks_failed) == 0 ]] || fail "$j: $(result $j)"
done
logs=$work/jobs/spread/logs
hosts=$(grep -ho 'up at [0-9.]*' "$logs"/worker-*.log | sort -u | wc -l)
[[ $hosts -ge 2 ]] || fail "spread: every worker on one host"
grep -q "TorchScript backend: .* loaded" "$logs/worker-0.log" || fail "spread: worker-0 did not load the plugin"
a=$(field alone test_accuracy) b=$(field spread test_accuracy)
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.01) }' ||
  fail "accuracy on Slurm $b, alone $a: more than 0.01 apart"
wait_for 20 no_jobs_left spread || fail "Slurm jobs left behind: $(squeue -h -o '%i %j %T')"
echo "alone: accuracy $a; on Slurm ($hosts hosts): $b"
echo "PASS"
