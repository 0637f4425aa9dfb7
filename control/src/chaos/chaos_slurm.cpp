// Faults on nodes the Slurm launcher started (nodes.json: pid 0, slurm_job set). They may run on
// any host, so they go through slurmctld: kill and stop are `scancel --full --signal=KILL/STOP`
// (SIGCONT the same way), preempt submits a job of the control (high-priority) partition that
// takes the worker's host for `hold` seconds: Slurm preempts what runs there, as a real priority job
// would, and the victims leave on its SIGTERM and are resubmitted.
#include <signal.h>

#include "chaos_observe.hpp"
#include "troupe/cluster/config.hpp"
#include "troupe/job/job_file.hpp"

namespace troupe::control {

expected<cluster::cluster_config> job_cluster(const std::string& job_dir) {
  auto spec = job::load_job_spec(job_dir);
  if (!spec) return spec.err();
  return spec->cluster;
}

expected<void> signal_slurm_node(const std::string& job_dir, long slurm_job, int sig) {
  auto cfg = job_cluster(job_dir);
  if (!cfg) return cfg.err();
  return cluster::signal_slurm_node(*cfg, slurm_job, sig);
}

std::string slurm_fault(const fault_spec& f, const cluster::node_record& n, const std::string& job_dir) {
  auto cfg = job_cluster(job_dir);
  if (!cfg) return "job.toml: " + cfg.err().to_string();
  if (f.kind == fault_kind::kill || f.kind == fault_kind::stop) {
    auto r = cluster::signal_slurm_node(*cfg, n.slurm_job, f.kind == fault_kind::kill ? SIGKILL : SIGSTOP);
    return r ? std::string() : std::string(to_string(f.kind)) + " failed: " + r.err().to_string();
  }
  if (n.role != cluster::node_role::worker) return "preempt: only workers run in the preemptible partition";
  auto dir = cluster::job_dir::open(job_dir);
  cluster::launch_site site{dir ? dir->job_id() : "troupe", job_dir + "/slurm_jobs"};
  auto id = cluster::preempt_slurm_node(*cfg, site, n.slurm_job, f.hold_s);
  return id ? std::string() : "preempt failed: " + id.err().to_string();
}

}  // namespace troupe::control
