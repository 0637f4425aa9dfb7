#include "troupe/cluster/config.hpp"

#include <sstream>
#include "slurm/commands.hpp"

#include "local/hosts.hpp"
#include "troupe/cluster/addresses.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/local/launcher.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/cluster/slurm/launcher.hpp"

namespace troupe::cluster {

namespace {

// The local launcher places a worker on one of cluster.hosts only (its check_host, when the job
// starts); checked here too, so that `troupe config check` says it. Slurm's nodes are asked of
// Slurm when the job starts.
void check_worker_host(config_section& s, const cluster_config& c) {
  if (c.launcher == "slurm" || c.worker_host.empty()) return;
  local::remote_hosts rh;
  for (const auto& h : c.hosts)
    if (auto p = local::parse_host_slots(h)) rh.hosts.push_back(*p);
  auto ok = c.hosts.empty() ? host_here_only(c.worker_host) : local::known_host(rh, c.worker_host);
  if (!ok) s.fail("worker_host", core_errc::invalid_argument, ok.err().context());
}

}  // namespace

cluster_config cluster_config::read(config_section s, cluster_config defaults) {
  cluster_config c = std::move(defaults);
  c.launcher = s.get_enum("launcher", c.launcher, {"local", "slurm"});
  c.capacity_cpus = s.get_double("capacity_cpus", c.capacity_cpus, 0, 1e6);
  c.capacity_memory_mb = s.get_int("capacity_memory_mb", c.capacity_memory_mb, 0, std::int64_t{1} << 40);
  c.capacity_gpus = s.get_int("capacity_gpus", c.capacity_gpus, -1, 1 << 16);
  c.metrics_host = s.get_string("metrics_host", c.metrics_host);
  c.metrics_port = s.get_int("metrics_port", c.metrics_port, -1, 65535);
  c.worker_cpus = s.get_double("worker_cpus", c.worker_cpus, 0, 1e4);
  c.control_partition = s.get_string("control_partition", c.control_partition);
  c.worker_partition = s.get_string("worker_partition", c.worker_partition);
  c.spare_partition = s.get_string("spare_partition", c.spare_partition);
  c.control_host = s.get_string("control_host", c.control_host);
  c.worker_host = s.get_string("worker_host", c.worker_host);
  c.account = s.get_string("account", c.account);
  c.qos = s.get_string("qos", c.qos);
  c.time_limit = s.get_string("time_limit", c.time_limit);
  c.sbatch_args = s.get_strings("sbatch_args", c.sbatch_args);
  c.slurm_bin_dir = s.get_string("slurm_bin_dir", c.slurm_bin_dir);
  c.hosts = s.get_strings("hosts", c.hosts);
  for (const auto& h : c.hosts)
    if (auto p = local::parse_host_slots(h); !p)
      s.fail("hosts", core_errc::invalid_argument, p.err().context());
  c.host_command = s.get_string("host_command", c.host_command);
  if (!c.hosts.empty() && c.host_command.find("{host}") == std::string::npos)
    s.fail(
        "host_command", core_errc::invalid_argument,
        "'" + c.host_command + "' must contain {host} when cluster.hosts lists hosts (e.g. \"ssh {host}\")");
  check_worker_host(s, c);
  c.host_fault_command = s.get_string("host_fault_command", c.host_fault_command);
  c.advertise = s.get_string("advertise", c.advertise);
  c.controller_timeout_s = s.get_double("controller_timeout_s", c.controller_timeout_s, 1, 86400);
  c.runner_timeout_s = s.get_double("runner_timeout_s", c.runner_timeout_s, 0, 86400);
  return c;
}

cluster_config cluster_config::read(config_section s) {
  return read(s, cluster_config{});
}

expected<resources> configured_capacity(const cluster_config& cfg) {
  auto cap = local_capacity();
  if (!cap) return cap;
  if (cfg.capacity_cpus > 0) cap->cpus = cfg.capacity_cpus;
  if (cfg.capacity_memory_mb > 0)
    cap->memory_bytes = static_cast<std::uint64_t>(cfg.capacity_memory_mb) << 20;
  if (cfg.capacity_gpus >= 0) cap->gpus = static_cast<int>(cfg.capacity_gpus);
  return cap;
}

namespace {

slurm::options slurm_options(const cluster_config& cfg, const launch_site& site) {
  slurm::options so;
  so.partition = cfg.control_partition;
  so.worker_partition = cfg.worker_partition;
  so.spare_partition = cfg.spare_partition;
  so.account = cfg.account;
  so.qos = cfg.qos;
  so.time_limit = cfg.time_limit;
  so.sbatch_args = cfg.sbatch_args;
  so.bin_dir = cfg.slurm_bin_dir;
  so.job_name_prefix = "troupe-" + site.job_id;
  so.jobs_file = site.jobs_file;
  return so;
}

// The local launcher with other hosts: the master here, at the address the hosts reach.
expected<control_plan> plan_hosts(const cluster_config& cfg) {
  control_plan p;
  p.master_node = "localhost";
  p.node_listen = "@host:0";
  std::string addr = cfg.advertise;
  if (!addr.empty())
    if (auto c = check_advertise(addr); !c) return c.err();
  if (addr.empty()) {
    auto first = local::parse_host_slots(cfg.hosts.front());
    if (!first) return first.err();
    auto ip = ipv4_of(first->name);
    auto me = ip ? local_address_towards(*ip) : expected<std::string>(ip.err());
    if (!me)
      return make_unexpected(
          cluster_errc::invalid_spec,
          "cluster.advertise: set it to this machine's address that the hosts reach (none found "
          "towards host '" +
              first->name + "': " + me.err().to_string() + ")");
    addr = *me;
  }
  p.runner_host = p.master_host = addr;
  return p;
}

}  // namespace

expected<std::unique_ptr<launcher>> make_launcher(const cluster_config& cfg, exit_callback on_exit,
                                                  const launch_site& site, troupe::clock& clk) {
  if (cfg.launcher == "slurm") {
    auto l = slurm::launcher::create({std::move(on_exit), std::nullopt, clk}, slurm_options(cfg, site));
    if (!l) return l.err();
    return std::unique_ptr<launcher>(std::move(*l));
  }
  if (cfg.launcher != "local")
    return make_unexpected(cluster_errc::invalid_spec,
                           "cluster.launcher '" + cfg.launcher + "': expected \"local\" or \"slurm\"");
  auto cap = configured_capacity(cfg);
  if (!cap) return cap.err();
  local::remote_hosts rh;
  for (const auto& h : cfg.hosts) {
    auto p = local::parse_host_slots(h);
    if (!p) return p.err();
    rh.hosts.push_back(*p);
  }
  if (!rh.hosts.empty()) rh.command = local::split_words(cfg.host_command);
  auto l = local::launcher::create({std::move(on_exit), *cap, clk}, std::move(rh));
  if (!l) return l.err();
  return std::unique_ptr<launcher>(std::move(*l));
}

expected<int> cancel_leftovers(const cluster_config& cfg, const launch_site& site) {
  if (cfg.launcher != "slurm" || site.jobs_file.empty()) return 0;
  return slurm::launcher::cancel_recorded(site.jobs_file, slurm_options(cfg, site));
}

expected<long> submit_slurm_node(const cluster_config& cfg, const launch_site& site, const node_spec& spec) {
  auto exe = self_exe();
  if (!exe) return exe.err();
  return slurm::submit(spec, spec.program.empty() ? *exe : spec.program, slurm_options(cfg, site));
}

expected<void> check_slurm_partitions(const cluster_config& cfg, std::chrono::milliseconds timeout) {
  if (cfg.launcher != "slurm") return {};
  auto so = slurm_options(cfg, {});
  so.command_timeout = timeout;
  auto cpus = slurm::check_partitions(so);
  if (!cpus) return cpus.err();
  return {};
}

expected<std::string> slurm_job_state(const cluster_config& cfg, long slurm_job) {
  return slurm::job_state(slurm_job, slurm_options(cfg, {}));
}

bool slurm_state_is_final(const std::string& state) {
  return slurm::terminal_state(state);
}

expected<void> signal_slurm_node(const cluster_config& cfg, long slurm_job, int sig) {
  return slurm::signal_job(slurm_job, sig, slurm_options(cfg, {}));
}

expected<long> preempt_slurm_node(const cluster_config& cfg, const launch_site& site, long slurm_job,
                                  double seconds) {
  return slurm::preempt_job(slurm_job, cfg.control_partition, seconds, slurm_options(cfg, site));
}

expected<control_plan> plan_control(const cluster_config& cfg) {
  control_plan p;
  if (cfg.launcher != "slurm" && cfg.hosts.empty()) return p;
  if (cfg.launcher != "slurm") return plan_hosts(cfg);
  auto so = slurm_options(cfg, {});
  p.master_node = cfg.control_host;
  if (p.master_node.empty()) {
    auto n = slurm::first_node(cfg.control_partition, so);
    if (!n) return n.err();
    p.master_node = *n;
  }
  auto addr = slurm::node_addr(p.master_node, so);
  // The host named by the job file where Slurm does not know it (invalid_spec); Slurm's own failure
  // (scontrol missing from slurm_bin_dir, slurmctld down) is no fault of control_host's.
  if (!addr)
    return cfg.control_host.empty() || !(addr.err() == cluster_errc::invalid_spec)
               ? addr.err()
               : std::move(addr).err().wrap("cluster.control_host");
  p.master_host = *addr;
  auto me = local_address_towards(p.master_host);
  if (!me) return me.err();
  p.runner_host = *me;
  p.ps_node = p.master_node;
  p.node_listen = "@host:0";
  return p;
}

}  // namespace troupe::cluster
