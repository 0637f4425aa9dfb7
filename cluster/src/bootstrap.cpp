#include "troupe/cluster/bootstrap.hpp"

#include <cstdlib>

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/process.hpp"

namespace troupe::cluster {

namespace {
unexpected bad(const std::string& flag, const std::string& why) {
  return make_unexpected(cluster_errc::invalid_spec, "troupe node: " + flag + ": " + why);
}
}  // namespace

node_id node_args::id() const {
  return {node_name(role, index), incarnation};
}

expected<void> validate_node_args(const node_args& a) {
  const char* addr_flag = a.role == node_role::master ? "--listen" : "--join";
  if (auto ok = validate_address(a.master); !ok) return bad(addr_flag, ok.err().context());
  if (a.role == node_role::dispenser)
    return bad("--role", "dispenser is not a node of its own (it runs in the master)");
  if (a.job_dir.empty()) return bad("--job-dir", "must not be empty");
  if (a.train_dir.empty()) return bad("--train", "must not be empty");
  if (a.test_dir.empty()) return bad("--test", "must not be empty");
  return {};
}

std::vector<std::string> node_argv(const node_args& a) {
  std::vector<std::string> argv = {"troupe",
                                   "node",
                                   "--job-dir",
                                   a.job_dir,
                                   "--role",
                                   std::string(to_string(a.role)),
                                   "--index",
                                   std::to_string(a.index),
                                   "--incarnation",
                                   std::to_string(a.incarnation),
                                   "--train",
                                   a.train_dir,
                                   "--test",
                                   a.test_dir,
                                   a.role == node_role::master ? "--listen" : "--join",
                                   a.master};
  argv.insert(argv.end(), a.extra.begin(), a.extra.end());
  return argv;
}

std::vector<std::pair<std::string, std::string>> node_environment(node_role role, const char* inherited) {
  if (role != node_role::master) return {};
  std::string tunables = inherited && *inherited ? std::string(inherited) + ":" : std::string();
  return {{"GLIBC_TUNABLES", tunables + "glibc.malloc.tcache_count=0"}};
}

node_spec node_launch_spec(const node_args& a, const job_dir& dir, resources need) {
  node_spec s;
  s.id = a.id();
  s.argv = node_argv(a);
  s.env = {{"TROUPE_NODE", s.id.to_string()}};
  for (auto& kv : node_environment(a.role, std::getenv("GLIBC_TUNABLES"))) s.env.push_back(std::move(kv));
  s.log_file = dir.log_path(s.id.name);
  s.need = need;
  return s;
}

nodes_file make_nodes_file(const std::string& job_id, std::uint64_t epoch, const std::string& control_address,
                           const std::vector<node_entry>& nodes, std::int64_t now_ms) {
  nodes_file f;
  f.job_id = job_id;
  f.epoch = epoch;
  f.updated_ms = now_ms;
  f.runner_address = control_address;
  for (const auto& n : nodes) {
    node_record r;
    r.id = n.id;
    r.role = n.role;
    r.address = n.address;
    r.pid = n.handle ? n.handle->pid : 0;
    r.start_time = r.pid > 0 ? n.start_time : 0;
    if (r.pid > 0 && r.start_time == 0)
      if (auto st = read_process_stat(r.pid)) r.start_time = st->start_time;
    r.state = n.handle ? (n.leaving ? "leaving" : "running") : "exited";
    if (!n.handle) r.exit = n.ended;
    if (n.handle) r.slurm_job = n.slurm_job;
    if (n.handle) r.host = n.handle->host;
    f.nodes.push_back(std::move(r));
  }
  return f;
}

}  // namespace troupe::cluster
