// `troupe run job.toml`: the job runner. It creates the job directory, prepares the datasets,
// launches the master, the PS shards and the workers through the cluster::launcher the job's
// [cluster] section selects (local: child processes, one process group each, no orphans),
// relaunches any node that dies (the master and PS shards always, workers while fewer than the
// target run), fences a node the master declared dead (a hung process: SIGKILL to its group) so
// its replacement starts at once, shows a progress line, serves `troupe status/scale/stop` and,
// once the master reports the job finished, stops every node and prints the final metrics as one
// JSON line on stdout. It watches the master as the master watches the others: a master that stops
// answering (hung, SIGSTOPped) is fenced and relaunched. What happened is kept in the job
// directory: logs/runner.log, nodes.json (final states), result.json (every outcome, with the
// reason). `--resume JOB_DIR` continues a job whose runner died (its journal, PS checkpoints),
// after cleaning up what that runner left (orphan nodes, shared memory).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace troupe::control {

struct run_options {
  std::string file;                      // the job file; empty with `resume`
  std::string file_name;                 // how messages name it (empty: `file`; predict's is made for it)
  std::string resume;                    // --resume JOB_DIR: continue that job
  std::vector<std::string> overrides;    // --set key=value
  std::string job_id;                    // empty: <name>-<time>-<random>
  std::optional<std::uint32_t> workers;  // --workers N (overrides [job] workers)
  bool progress = true;                  // the progress line on stderr
  bool quiet_log = false;   // the CLI's level lowered to warn: logs/runner.log at info, stderr at warn
  bool result_line = true;  // the final JSON line on stdout (result.json is written anyway)
};

// `troupe run --submit`: the runner itself as a Slurm job ([cluster] launcher = "slurm") on the
// control partition and host, running `troupe run FILE --job-id ID` there; prints the Slurm job
// id and the job directory (under [job] root, which every host must see) and returns at once.
// `troupe status/scale/stop --job-dir` then work against it. Returns 0 when submitted, 2 for a
// bad job file or a local launcher, 1 when sbatch fails (its message) or the job exists.
int submit_job(const run_options& o);

// Returns the process exit code: 0 finished (every task done), 1 failed (quarantined tasks, a node
// that keeps dying, the master unreachable), 2 bad configuration, 130 interrupted.
int run_job(const run_options& o);

// A new job's id when none is given: "<name>-<local time>-<4 random hex>" (two jobs started in the
// same second get different ids).
std::string default_job_id(const std::string& name);

}  // namespace troupe::control
