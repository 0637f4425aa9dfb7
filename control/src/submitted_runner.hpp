// The Slurm job of the runner `troupe run --submit` queued for a job, recorded in
// <root>/<id>.runner.job beside the job directory (which exists only once that runner starts): its
// id on the first line, the job file's cluster.slurm_bin_dir on the second. `--submit` reads and
// writes it under a lock (one runner a job); `troupe status` and `stop --job-dir` read it to tell
// and cancel a runner still queued.
#pragma once

#include <optional>
#include <string>

#include "troupe/cluster/config.hpp"

namespace troupe::control {

// <id> of the job directory <root>/<id> (made or not; "jobs/x/" too).
std::string job_dir_name(const std::string& job_dir);
// <root>/<id>.runner.job for the job directory <root>/<id> (made or not).
std::string submitted_runner_path(const std::string& job_dir);

// The record, held under an exclusive flock from construction (before the check) to record() or
// destruction (after the submission): two --submits of one job take turns.
class submitted_runner {
 public:
  explicit submitted_runner(std::string path);
  submitted_runner(const submitted_runner&) = delete;
  submitted_runner& operator=(const submitted_runner&) = delete;
  ~submitted_runner();

  // Why another runner may not be submitted now ("" when it may): the one recorded is queued or
  // runs. A record that cannot be read or whose job Slurm no longer knows does not stop a submission.
  std::string busy(const cluster::cluster_config& cfg, const std::string& what) const;
  // Records `job` as the runner submitted last (a failed write leaves only the check undone) and
  // lets the next --submit in: it waits no longer than the sbatch here.
  void record(long job, const cluster::cluster_config& cfg);

 private:
  std::string path_;
  int fd_ = -1;
};

// What the record of a job directory says of its runner, asked of Slurm now.
struct recorded_runner {
  long job = 0;
  std::string state;   // squeue's: PENDING, RUNNING, CANCELLED...; "" when Slurm no longer knows it
  std::string record;  // the record's path
  cluster::cluster_config cluster;  // enough to reach that Slurm (launcher, slurm_bin_dir)
  bool final() const;
};
// nullopt: no record for `job_dir` (or not one --submit wrote), or Slurm could not be asked.
std::optional<recorded_runner> read_recorded_runner(const std::string& job_dir);

}  // namespace troupe::control
