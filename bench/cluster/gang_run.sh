#!/usr/bin/env bash
# The gang-scheduled baseline of the cluster experiments (docs/cluster_experiments.md): run inside
# ONE Slurm allocation of all the job's CPUs (sbatch -n N), as a traditional job is. The runner
# stays on the batch host with the master; the PS shards and workers go to the allocation's hosts,
# one per allocated CPU, each started as an `srun` step of the allocation (the local launcher's
# host list and host command: docs/cluster.md). Nothing is elastic: min_workers = max_workers.
# Usage: gang_run.sh TROUPE_BINARY JOB_FILE JOB_ID (the job file without a [cluster] section)
set -euo pipefail
bin=$1 file=$2 id=$3
[[ -n "${SLURM_JOB_ID:-}" ]] || { echo "gang_run.sh: not inside a Slurm allocation" >&2; exit 2; }
# SLURM_TASKS_PER_NODE is like "4(x2),3,2": counts per node, in the order of the node list.
counts=()
IFS=, read -ra parts <<< "$SLURM_TASKS_PER_NODE"
for p in "${parts[@]}"; do
  if [[ $p =~ ^([0-9]+)\(x([0-9]+)\)$ ]]; then
    for ((i = 0; i < BASH_REMATCH[2]; i++)); do counts+=("${BASH_REMATCH[1]}"); done
  else
    counts+=("$p")
  fi
done
mapfile -t names < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
hosts=""
for i in "${!names[@]}"; do hosts+="${hosts:+, }\"${names[$i]}:${counts[$i]}\""; done
me=$(getent hosts "$(hostname)" | awk '{print $1; exit}')
gang="${file%.toml}.gang.toml"
{
  cat "$file"
  echo "[cluster]"
  echo "hosts = [$hosts]"
  echo "host_command = \"srun --jobid=$SLURM_JOB_ID --overlap -N1 -n1 -w {host} --quiet\""
  echo "advertise = \"$me\""
} > "$gang"
echo "gang_run.sh: job $id in allocation $SLURM_JOB_ID on ${names[*]} (tasks ${counts[*]}), runner on $me"
# A gang job that Slurm preempted and requeued starts again here: it resumes where its journal and
# checkpoints are (kinder to the baseline than a restart from scratch).
root=$(sed -n 's/^root = "\(.*\)"$/\1/p' "$file" | head -1)
if [[ -d "$root/$id" ]]; then
  cp "$gang" "$root/$id/job.toml"  # this allocation's hosts
  exec "$bin" run --resume "$root/$id" --quiet
fi
exec "$bin" run "$gang" --job-id "$id" --quiet
