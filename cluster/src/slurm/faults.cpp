// One-off Slurm jobs (commands.hpp): a node's sbatch; the faults `troupe chaos` injects into
// nodes that run as Slurm jobs, wherever they run: a signal through slurmctld (`scancel --full
// --signal`, a kill `--batch`), and preemption on demand by a job of the high-priority partition
// that takes the node's host whole; the launcher's fence of one node; and the cancel of every job
// a killed owner recorded.
#include <signal.h>

#include <cmath>
#include <fstream>

#include "slurm/commands.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/slurm/launcher.hpp"

namespace troupe::cluster::slurm {

expected<long> submit(const node_spec& spec, const std::string& program, const options& so,
                      troupe::clock& clk) {
  auto r = run_tool(sbatch_argv(spec, program, so), so.bin_dir, so.command_timeout, 0, clk);
  if (!r) return r.err();
  long job = std::atol(r->out.c_str());  // --parsable: "<id>" or "<id>;<cluster>"
  if (r->code != 0 || job <= 0)
    return make_unexpected(cluster_errc::launch_failed,
                           "sbatch for node " + spec.id.to_string() + ": " + said(*r));
  return job;
}

expected<void> signal_job(long job, int sig, const options& so) {
  // A KILL goes to the batch step alone (the node: the batch script execs it), which Slurm delivers
  // as is; with --full Slurm makes it a cancel (SIGCONT, SIGTERM, SIGKILL after KillWait). Slurm
  // ends the step's other processes once the node is gone.
  const std::string scope = sig == SIGKILL ? "--batch" : "--full";
  auto r = run_tool({"scancel", scope, "--signal=" + std::to_string(sig), std::to_string(job)}, so.bin_dir,
                    so.command_timeout);
  if (!r) return r.err();
  if (r->code != 0)
    return make_unexpected(cluster_errc::no_such_node, "scancel " + std::to_string(job) + ": " + said(*r));
  return {};
}

expected<std::string> job_state(long job, const options& so) {
  auto r = run_tool({"squeue", "-h", "-t", "all", "-j", std::to_string(job), "-o", "%T"}, so.bin_dir,
                    so.command_timeout);
  if (!r) return r.err();
  // An id Slurm forgot: squeue exits 1 ("Invalid job id specified"); that is no error here.
  if (r->code != 0 && r->err.find("Invalid job id") == std::string::npos)
    return make_unexpected(cluster_errc::launch_failed, "squeue -j " + std::to_string(job) + ": " + said(*r));
  auto s = r->code == 0 ? r->out : std::string();
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

expected<void> fence_job(long job, const options& so) {
  // A fenced node must not act again: killed at once (signal_job), not cancelled (a SIGTERM after
  // a SIGCONT, on which a stopped node woke up and left cleanly). A refused signal is an error, to
  // try again (under load scancel fails for a running job too: a cancel then woke a SIGSTOPped
  // node, which ran on); only a job Slurm says has not started yet is cancelled, and one Slurm says
  // is over is no node any more.
  auto killed = signal_job(job, SIGKILL, so);
  if (killed) return {};
  auto state = job_state(job, so);
  if (!state) return state.err();
  if (*state == "PENDING" || *state == "CONFIGURING") {
    auto r = run_tool({"scancel", std::to_string(job)}, so.bin_dir, so.command_timeout);
    if (!r) return r.err();
    if (r->code != 0)
      return make_unexpected(cluster_errc::launch_failed, "scancel " + std::to_string(job) + ": " + said(*r));
    return {};
  }
  if (state->empty() || terminal_state(*state) || *state == "COMPLETING") return {};
  return killed.err();
}

expected<long> preempt_job(long job, const std::string& partition, double seconds, const options& so) {
  auto q =
      run_tool({"squeue", "-h", "-j", std::to_string(job), "-o", "%N|%T"}, so.bin_dir, so.command_timeout);
  if (!q) return q.err();
  auto bar = q->out.find('|');
  if (q->code != 0 || bar == std::string::npos || q->out.compare(bar + 1, 7, "RUNNING") != 0)
    return make_unexpected(cluster_errc::no_such_node,
                           "Slurm job " + std::to_string(job) + " is not running");
  std::string host = q->out.substr(0, bar);
  // A host that runs jobs of the partition itself (the control plane) cannot be taken: the
  // preempting job would wait there, past the troupe job's end.
  if (!partition.empty()) {
    auto c =
        run_tool({"squeue", "-h", "-w", host, "-p", partition, "-o", "%i"}, so.bin_dir, so.command_timeout);
    if (!c) return c.err();
    if (c->code != 0 || !c->out.empty())
      return make_unexpected(cluster_errc::launch_failed, "host " + host + " runs jobs of partition " +
                                                              partition + ": nothing there can be preempted");
  }
  std::vector<std::string> argv = {
      "sbatch", "--parsable", "--exclusive", "-N1", "-w", host, "-J", so.job_name_prefix + ":chaos-preempt",
      "-o",     "/dev/null"};
  if (!partition.empty()) argv.insert(argv.end(), {"-p", partition});
  argv.insert(argv.end(), {"--wrap", "sleep " + std::to_string(std::max(1L, std::lround(seconds)))});
  auto r = run_tool(argv, so.bin_dir, so.command_timeout);
  if (!r) return r.err();
  long id = std::atol(r->out.c_str());
  if (r->code != 0 || id <= 0)
    return make_unexpected(cluster_errc::launch_failed, "sbatch of the preempting job: " + said(*r));
  if (!so.jobs_file.empty()) std::ofstream(so.jobs_file, std::ios::app) << id << "\n";
  return id;
}

expected<int> launcher::cancel_recorded(const std::string& jobs_file, const options& so) {
  std::ifstream in(jobs_file);
  if (!in) return 0;
  std::vector<std::string> argv = {"scancel"};
  long id;
  while (in >> id) argv.push_back(std::to_string(id));
  if (argv.size() == 1) return 0;
  auto q = run_tool({"squeue", "-h", "-o", "%i|%T"}, so.bin_dir, so.command_timeout);
  if (!q) return q.err();
  auto live = parse_squeue(q->out);
  std::vector<std::string> cancel = {"scancel"};
  for (std::size_t i = 1; i < argv.size(); ++i)
    if (live.count(std::atol(argv[i].c_str()))) cancel.push_back(argv[i]);
  if (cancel.size() == 1) return 0;
  auto r = run_tool(cancel, so.bin_dir, so.command_timeout);
  if (!r) return r.err();
  return static_cast<int>(cancel.size() - 1);
}

}  // namespace troupe::cluster::slurm
