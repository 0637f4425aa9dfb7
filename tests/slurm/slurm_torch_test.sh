#!/usr/bin/env bash
# A user's PyTorch module (TorchScript, docs/models.md) on the Slurm test cluster: the MLP allreduce
# job of slurm_allreduce_test.sh with the same MLP written in PyTorch, 4 workers each a Slurm job of
# its own, each loading the TorchScript plugin and the module on its host. Every task is done once
# and the accuracy is within 0.015 of the same job on this machine alone.
# Usage: slurm_torch_test.sh TROUPE_BINARY. Exit 77 (ctest: skipped) without root.
set -uo pipefail
NAME=slurm-torch
B=$(realpath "$1")
source "$(dirname "$0")/lib.sh"

torch_mlp_module "$work/mlp.pt" || fail "scripting the module"
torch_job() { torch_mlp_toml "$work" "$cache" "$1" "$work/mlp.pt"; }
alone_and_spread torch_job
grep -q "TorchScript plugin: .* loaded" "$logs/worker-0.log" || fail "spread: worker-0 did not load the plugin"
wait_for 20 no_jobs_left spread || fail "Slurm jobs left behind: $(squeue -h -o '%i %j %T')"
echo "alone: accuracy $a; on Slurm ($hosts hosts): $b"
echo "PASS"
