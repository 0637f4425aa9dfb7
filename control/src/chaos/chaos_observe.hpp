// Watches a job under chaos: per fault, when the master's membership (via the runner's status)
// stopped showing the node alive, and when a new incarnation was alive and training moved again.
#pragma once

#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/control/chaos.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::control {

// Faults on a node that is a Slurm job (chaos_slurm.cpp): kill, stop (SIGSTOP) or preempt of
// node `n`; returns a note ("" when done). And a signal to its job (SIGCONT after a stop).
std::string slurm_fault(const fault_spec& f, const cluster::node_record& n, const std::string& job_dir);
expected<void> signal_slurm_node(const std::string& job_dir, long slurm_job, int sig);
// The job's [cluster], from the job.toml its runner wrote (troupe chaos runs apart from it).
expected<cluster::cluster_config> job_cluster(const std::string& job_dir);

// Host faults (chaos_hosts.cpp), done through the job's cluster.host_fault_command.
class host_faults {
 public:
  host_faults(std::string job_dir, troupe::clock& clk) : job_dir_(std::move(job_dir)), clock_(clk) {}
  // The host rec.spec hits (a random one of those running nodes of the job, for "host"): fills
  // rec.host, rec.nodes and rec.node (the node whose recovery is timed: a worker when the host
  // has one) and returns that node; nullopt with rec.note when the host runs none of the job's nodes.
  std::optional<cluster::node_record> pick(fault_record& rec, std::mt19937_64& rng);
  // Does the fault to rec.host; a partition or throttle is undone `hold` seconds later.
  void inject(fault_record& rec, std::size_t index);
  // Heals the partitions and lifts the throttles that are due (all: every one, at the end).
  void undo_due(bool all, std::vector<fault_record>& recs);
  bool holding() const { return !held_.empty(); }

 private:
  struct hold {
    std::string host, action, arg;
    troupe::clock::time_point at;
    std::size_t fault;
  };
  std::string job_dir_;
  troupe::clock& clock_;
  std::vector<hold> held_;
};

// How the job in `job_dir` ended ("finished", "failed", ...: the runner's result.json), "" while it
// runs or when unknown.
std::string job_end_state(const std::string& job_dir);

class observer {
 public:
  observer(std::string job_dir, troupe::clock& clk) : job_dir_(std::move(job_dir)), clock_(clk) {}
  // Takes the baselines (incarnation, samples, requeued, restarts) just before the fault.
  // `index`: where the fault's record will be in the records vector.
  void before_fault(std::size_t index, const fault_record& rec, const cluster::node_record& n);
  // One status poll; updates detection and recovery of every open record.
  void poll(std::vector<fault_record>& recs);
  bool all_resolved(const std::vector<fault_record>& recs) const;
  // At the end: the records still open get the restarts and re-queues seen since their fault (a
  // stopped node resumed before it was declared dead, and a fault detected but not seen recovered
  // in a job that ended, say so).
  void close(std::vector<fault_record>& recs);

 private:
  struct baseline {
    std::uint64_t incarnation = 0, samples = 0, requeued = 0, restarts = 0, samples_at_detect = 0;
    std::uint64_t master = 0;  // the master's incarnation at the fault (membership is that master's)
    troupe::clock::time_point at;
    bool done = false;
  };
  void update(fault_record& rec, baseline& b, const nlohmann::json& st, const cluster::nodes_file* nodes);
  static void count_since(fault_record& rec, const baseline& b, const nlohmann::json& st);
  std::string job_dir_;
  troupe::clock& clock_;
  nlohmann::json last_;                   // the latest status answer
  std::map<std::size_t, baseline> open_;  // by index in the records vector
};

}  // namespace troupe::control
