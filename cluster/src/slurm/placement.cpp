// Where Slurm puts nodes: the master's host and its address, the hosts workers may be placed on
// (commands.hpp).
#include <cstdlib>
#include <utility>

#include "slurm/commands.hpp"
#include "troupe/cluster/errc.hpp"

namespace troupe::cluster::slurm {

expected<std::string> node_addr(const std::string& name, const options& so) {
  auto r = run_tool({"scontrol", "show", "node", "-o", name}, so.bin_dir, so.command_timeout);
  if (!r) return r.err();
  auto addr = r->code == 0 ? scontrol_field(r->out, "NodeAddr") : std::string();
  if (addr.empty()) {
    const auto what = r->code == 0 ? std::string("no NodeAddr") : said(*r);
    // "Node hx not found": the job file's mistake (exit 2), not Slurm's failure.
    const bool unknown = what.find(" not found") != std::string::npos;
    return make_unexpected(unknown ? cluster_errc::invalid_spec : cluster_errc::launch_failed,
                           "Slurm node '" + name + "': " + what);
  }
  return addr;
}

expected<std::string> first_node(const std::string& partition, const options& so) {
  std::vector<std::string> argv = {"sinfo", "-h", "-N", "-o", "%N"};
  if (!partition.empty()) argv.insert(argv.end(), {"-p", partition});
  auto r = run_tool(argv, so.bin_dir, so.command_timeout);
  if (!r) return r.err();
  if (r->code != 0)
    return make_unexpected(cluster_errc::launch_failed, "sinfo failed (is slurmctld up?): " + said(*r));
  auto node = first_line(r->out);
  if (node.empty())
    return make_unexpected(cluster_errc::invalid_spec,
                           "Slurm has no partition '" + partition + "' (or it has no nodes)");
  return node;
}

expected<void> worker_host(const std::string& host, const options& so) {
  const auto& partition = so.worker_partition.empty() ? so.partition : so.worker_partition;
  auto bad = [&](const std::string& why) {
    return make_unexpected(cluster_errc::invalid_spec, "host '" + host + "': " + why);
  };
  if (host.empty() || host.find_first_of(",[] \t\n") != std::string::npos)
    return bad("not a Slurm node name (one node, no list)");
  std::vector<std::string> argv = {"sinfo", "-h", "-N", "-n", host, "-o", "%N"};
  if (!partition.empty()) argv.insert(argv.end(), {"-p", partition});
  auto r = run_tool(argv, so.bin_dir, so.command_timeout);
  if (!r) return r.err();
  if (r->code != 0)
    return make_unexpected(cluster_errc::launch_failed, "sinfo failed (is slurmctld up?): " + said(*r));
  // A node Slurm does not know, or one of another partition: sinfo lists nothing (exit 0).
  if (first_line(r->out) != host)
    return bad(partition.empty()
                   ? "Slurm has no such node"
                   : "not a node of partition '" + partition + "', where the job's workers run");
  return {};
}

expected<double> partition_cpus(const std::string& partition, const options& so, troupe::clock& clk) {
  std::vector<std::string> sinfo = {"sinfo", "-h", "-o", "%C"};
  if (!partition.empty()) sinfo.insert(sinfo.begin() + 1, {"-p", partition});
  auto r = run_tool(sinfo, so.bin_dir, so.command_timeout, 0, clk);
  if (!r) return r.err();
  if (r->code != 0)
    return make_unexpected(cluster_errc::launch_failed, "sinfo failed (is slurmctld up?): " + said(*r));
  if (r->out.empty())
    return make_unexpected(cluster_errc::invalid_spec, "Slurm has no partition '" + partition + "'");
  // %C: allocated/idle/other/total
  return std::atof(r->out.substr(r->out.rfind('/') + 1).c_str());
}

expected<double> check_partitions(const options& so, troupe::clock& clk) {
  auto cpus = partition_cpus(so.partition, so, clk);
  if (!cpus) return std::move(cpus).err().wrap("cluster.control_partition");
  for (const auto& [key, other] : {std::pair{"cluster.worker_partition", &so.worker_partition},
                                   std::pair{"cluster.spare_partition", &so.spare_partition}}) {
    if (other->empty() || *other == so.partition) continue;
    auto w = partition_cpus(*other, so, clk);  // an unknown partition is named now, not at the first sbatch
    if (!w) return std::move(w).err().wrap(key);
  }
  return cpus;
}

}  // namespace troupe::cluster::slurm
