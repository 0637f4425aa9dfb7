// The [cluster] section of a job file and the launcher it selects. `troupe run` reads it with the
// rest of the job file (an unknown key or a bad value is the usual error naming file and key) and
// starts every node through make_launcher(). (Where job directories go is [job] root.)
//
//   [cluster]
//   launcher = "local"            # backend: "local" (this machine) or "slurm" (docs/slurm.md)
//   capacity_cpus = 0.0           # local: 0: detect (local_capacity); else the cores nodes may reserve
//   capacity_memory_mb = 0        # local: 0: detect
//   capacity_gpus = -1            # local: -1: detect; else the GPUs nodes may reserve
//   control_partition = ""        # slurm: master and PS shards (not preempted); "": the default one
//   worker_partition = ""         # slurm: workers (preemptible); "": control_partition
//   spare_partition = ""          # slurm: when set, the job keeps max_workers workers submitted:
//                                 #   `workers` of them in worker_partition, the rest here (a
//                                 #   partition every other one preempts: spare capacity only)
//   control_host = ""             # slurm: the node the master and PS shards run on (the master's
//                                 #   address is fixed for the job's life); "": the control partition's first
//                                 node
//   worker_host = ""              # slurm, local with hosts: the host the job's first workers start on
//                                 #   (as `troupe scale --host` for the workers it adds; a relaunch goes
//                                 #   where the launcher puts it); "": where the launcher puts them
//   worker_cpus = 0.0             # CPUs each worker reserves (slurm: -c); 0: the backend's default
//   account = "", qos = "", time_limit = ""   # slurm: -A, -q, -t for every node's job
//   sbatch_args = []              # slurm: further sbatch options, verbatim
//   slurm_bin_dir = ""            # slurm: where sbatch, squeue, ... are; "": PATH
//   controller_timeout_s = 300    # slurm: how long the job trains on while slurmctld does not
//                                 #   answer before it fails (exit 1)
//   runner_timeout_s = 60         # a node the runner started ends itself when the runner's heartbeat
//                                 #   (<job dir>/runner.beat) has not changed for this long (0: never)
//   metrics_host = ""             # where the master serves Prometheus /metrics (docs/observe.md); "":
//                                 #   the master's own address (loopback for a local job, its host's
//                                 #   with Slurm or cluster.hosts, where a scrape needs the job token)
//   metrics_port = 0              # 0: a free port the runner picks (in nodes.json); -1: no /metrics
//   hosts = []                    # local: other hosts, "name" or "name:slots" (docs/hosts.md); PS
//                                 #   shards and workers fill them, the master stays here
//   host_command = ""             # local: the command that runs a node on a host, words split on
//                                 #   spaces, {host} replaced: "ssh {host}", "scripts/hosts.sh exec {host}"
//   host_fault_command = ""       # troupe chaos host faults: the command that acts on a host, {action}
//                                 #   {host} {arg} {job_dir} replaced (docs/chaos.md "Host faults"); "":
//                                 #   "<host_command's hosts.sh> {action} {host} {arg}" for scripts/hosts.sh
//                                 hosts
//   advertise = ""                # local with hosts: this machine's address the hosts reach (the
//                                 #   runner and master listen there); "": the route towards the first host
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "troupe/cluster/launcher.hpp"
#include "troupe/core/config.hpp"

namespace troupe::cluster {

struct cluster_config {
  std::string launcher = "local";
  double capacity_cpus = 0;
  std::int64_t capacity_memory_mb = 0;
  std::int64_t capacity_gpus = -1;
  std::string metrics_host;  // "": where the master listens
  std::int64_t metrics_port = 0;
  double worker_cpus = 0;
  std::string control_partition, worker_partition, spare_partition, control_host, worker_host;
  std::string account, qos, time_limit;
  std::vector<std::string> sbatch_args;
  std::string slurm_bin_dir;
  std::vector<std::string> hosts;
  std::string host_command;
  std::string host_fault_command;
  std::string advertise;
  double controller_timeout_s = 300;
  double runner_timeout_s = 60;

  // Reads the keys above from `s`; problems are recorded in the reader (see config.hpp).
  static cluster_config read(config_section s, cluster_config defaults);
  static cluster_config read(config_section s);
};

// The capacity the config asks for: detected fields where it says "detect". Errors: io_error
// from local_capacity().
expected<resources> configured_capacity(const cluster_config& cfg);

// What a backend needs to know of the job it runs: Slurm names its jobs after `job_id` and records
// every job id it submits in `jobs_file` (cancelled by cancel_recorded after a crash).
struct launch_site {
  std::string job_id = "troupe";
  std::string jobs_file;
};

// The launcher backend the config names, with its capacity. Errors: invalid_spec for an unknown
// backend, or the backend's own creation errors (Slurm: launch_failed when sinfo is missing or the
// controller does not answer, invalid_spec naming a partition Slurm does not have). Its timeouts
// read `clk` (launcher_options::clock).
expected<std::unique_ptr<launcher>> make_launcher(const cluster_config& cfg, exit_callback on_exit,
                                                  const launch_site& site = {},
                                                  troupe::clock& clk = troupe::clock::system());

// Cancels the batch jobs a dead owner of `site` recorded in site.jobs_file (Slurm: every one still
// queued or running; slurm::launcher::cancel_recorded); how many. The local backend's nodes die
// with their owner: 0. Errors: the backend's (squeue/scancel failing).
expected<int> cancel_leftovers(const cluster_config& cfg, const launch_site& site);

// Where the job's control plane is reached (local with hosts: the master here, "localhost", at the
// advertised address; PS shards and workers on the hosts by slots, "@host:0"): the runner listens on
// runner_host, the master on master_host (fixed for the job's life, so that a relaunched master is found
// again) placed on the backend's host master_node (empty: anywhere); PS shards and workers get `--listen
// node_listen` (empty: their loopback default). Local: everything on 127.0.0.1. Slurm: the master on
// control_host at the address Slurm has for it, the runner on this machine's address towards it,
// the others on their own host's address ("@host:0", resolve_listen). Errors: the backend's.
struct control_plan {
  std::string runner_host = "127.0.0.1";
  std::string master_host = "127.0.0.1";
  std::string master_node;
  std::string ps_node;  // where PS shards go (Slurm: master_node; local with hosts: "", by slots)
  std::string node_listen;
};
expected<control_plan> plan_control(const cluster_config& cfg);
// A Slurm job's partitions (control, worker, spare) exist, asked of sinfo, waiting `timeout` at most
// for it: invalid_spec naming the key of one Slurm has not; launch_failed when sinfo does not run
// or answer (slurmctld down: the runner's start says so). Nothing asked for the local launcher.
expected<void> check_slurm_partitions(const cluster_config& cfg, std::chrono::milliseconds timeout);

// One node submitted as a Slurm job of its own, outside any launcher (`troupe run --submit`: the
// runner), named <site.job_id prefix>:<node>, on the control partition (spec.host: -w). Returns
// the Slurm job id; errors: launch_failed with sbatch's message.
expected<long> submit_slurm_node(const cluster_config& cfg, const launch_site& site, const node_spec& spec);
// Its state as squeue lists it (`-t all`: "PENDING", "RUNNING", "FAILED", ...); "" once Slurm
// forgot it. Errors: squeue failing.
expected<std::string> slurm_job_state(const cluster_config& cfg, long slurm_job);
bool slurm_state_is_final(const std::string& state);  // a state after which the job never runs again

// Faults of `troupe chaos` for nodes the Slurm launcher started (nodes.json: slurm_job), through
// slurmctld so they reach any host: a signal (`scancel --full --signal`), and preemption by a job of
// the control partition (the high-priority one) that takes the node's host for `seconds` (its
// Slurm job id is returned and recorded in `site.jobs_file`, so it is cancelled with the job's).
expected<void> signal_slurm_node(const cluster_config& cfg, long slurm_job, int sig);
expected<long> preempt_slurm_node(const cluster_config& cfg, const launch_site& site, long slurm_job,
                                  double seconds);

}  // namespace troupe::cluster
