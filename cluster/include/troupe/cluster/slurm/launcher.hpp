// The Slurm launcher: every node is a Slurm batch job of its own (`sbatch`), so the cluster's
// scheduler starts, preempts and cancels nodes one by one (ElasticDL did the same with Kubernetes
// pods). The batch shell execs the node's program, so the node is the job's process and receives
// Slurm's signals itself (preemption's SIGTERM with `--signal=B:TERM`).
//
// How this backend keeps the launcher contract (../launcher.hpp), and where it differs:
// - launch() returns once Slurm has accepted the job (`sbatch --parsable` printed its id); the job
//   may then be PENDING until Slurm finds room: a node that cannot start yet waits in the queue and
//   joins whenever it starts. node_handle::pid holds the Slurm job id.
// - Exit reports come from Slurm's own state, polled every options.poll_interval (`squeue`, then
//   `scontrol show job` for the exit code): exit_status::state is the job state (COMPLETED, FAILED,
//   CANCELLED, PREEMPTED, NODE_FAIL, TIMEOUT, OUT_OF_MEMORY, ...), code and signal its ExitCode.
//   A job Slurm no longer knows is reported with code -1 and state UNKNOWN.
// - Jobs are submitted with --no-requeue: a preempted node ends PREEMPTED and its owner submits a
//   new one (pending), which is how the job grows back when capacity frees.
// - signal() is `scancel --full --signal`; SIGKILL, or any signal to a job still pending, cancels
//   the job. kill_all() cancels every job and waits (bounded by options.command_timeout) for the
//   reports.
// - No orphans: every job id submitted is appended to options.jobs_file when set, so a later run
//   (or `cancel_recorded`) cancels what a killed owner left behind; a Slurm job cannot die with
//   its owner process.
// - Resources: need.cpus (rounded up), need.memory_bytes and need.gpus become -c, --mem and
//   --gres=gpu:N. Slurm decides what fits: launch() never refuses for capacity; capacity() is the
//   partition's CPU count (sinfo), reserved() what the running (not pending) nodes asked for.
// - When the Slurm commands fail (slurmctld down), running nodes keep their state and
//   last_error() says why; reports resume when the controller answers again.
// - fence() and signal() return at once: the watcher sends them at its next look that squeue
//   answers, so while the controller does not answer they wait for it (the runner's loop calls
//   them, and must not wait out Slurm's own retries: 9 s a command, 18 s for scancel --signal).
//   launch() fails at once while squeue fails (launch_failed, "the Slurm controller does not
//   answer"), for its caller to submit again when it answers.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "troupe/cluster/launcher.hpp"

namespace troupe::cluster::slurm {

struct options {
  std::string partition;                   // -p; empty: the cluster's default partition
  std::string worker_partition;            // -p for node_spec::preemptible nodes; empty: partition
  std::string spare_partition;             // -p for node_spec::spare nodes; empty: as preemptible
  std::string account, qos, time_limit;    // -A, -q, -t; empty: not passed
  std::vector<std::string> sbatch_args;    // further sbatch options, verbatim
  std::string job_name_prefix = "troupe";  // job name: <prefix>:<node name>
  std::string bin_dir;    // directory of sbatch, squeue, scontrol, scancel, sinfo; empty: PATH
  std::string jobs_file;  // every submitted job id is appended here; empty: none
  std::chrono::milliseconds poll_interval{250};
  std::chrono::milliseconds command_timeout{20'000};  // per Slurm command
  int term_grace_seconds = 30;  // --signal=B:TERM@N: SIGTERM this long before the time limit
};

class launcher final : public cluster::launcher {
 public:
  // Checks that sinfo runs and both partitions exist (errors: launch_failed naming the missing
  // command or the controller that does not answer, invalid_spec naming an unknown partition), then
  // starts the watcher thread.
  static expected<std::unique_ptr<launcher>> create(launcher_options lo, options so);
  ~launcher() override;
  launcher(const launcher&) = delete;
  launcher& operator=(const launcher&) = delete;

  expected<node_handle> launch(const node_spec& spec) override;
  // Returns at once (errors: no_such_node once the node was reported); the watcher sends it as
  // the notes above say; a signal Slurm refuses for a job that is over is dropped, one the
  // controller did not take is sent again at the next look.
  expected<void> signal(const node_handle& h, int sig) override;
  // Returns at once (errors: no_such_node once the node was reported); the watcher thread kills the
  // job (`scancel --batch --signal=9 <id>`: a stopped process dies stopped; a job not started yet
  // is cancelled) at its next look, and while the controller does not answer, as soon as it does,
  // trying again while Slurm refuses. The exit report follows as for any exit.
  expected<void> fence(const node_handle& h) override;
  expected<std::optional<exit_status>> poll(const node_handle& h) const override;
  expected<exit_status> wait(const node_handle& h, std::chrono::milliseconds timeout) override;
  void kill_all() noexcept override;
  std::vector<node_handle> running() const override;
  resources capacity() const override;
  resources reserved() const override;

  // The Slurm state of a node not yet reported (PENDING, RUNNING, ...); empty once reported.
  std::string state(const node_handle& h) const;
  // The last failure of a Slurm command (empty while they work).
  std::string last_error() const;
  // Since when squeue fails (slurmctld down), and its message.
  std::optional<outage_info> outage() const override;
  // A node of the worker partition (sinfo -N -n HOST -p worker_partition): names the host and what
  // Slurm said when it is not (an unknown node, another partition's, slurmctld not answering).
  expected<void> check_host(const std::string& host) const override;
  // The node squeue listed the job on at the last poll (one host: a node runs in one task), else
  // the one its launch asked for (sbatch -w), else "".
  std::string host_of(const node_handle& h) const override;
  // "PENDING (<squeue's reason>)" while the job waits in the queue, as the last poll saw it.
  std::string waiting_why(const node_handle& h) const override;

  // Cancels every job id listed in `jobs_file` that Slurm still has queued or running; returns how
  // many it cancelled.
  static expected<int> cancel_recorded(const std::string& jobs_file, const options& so);

  struct impl;

 private:
  explicit launcher(std::unique_ptr<impl> p);
  std::unique_ptr<impl> impl_;
};

}  // namespace troupe::cluster::slurm
