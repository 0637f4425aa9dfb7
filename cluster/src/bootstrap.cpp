#include "troupe/cluster/bootstrap.hpp"

#include <unistd.h>

#include <algorithm>

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/process.hpp"

namespace troupe::cluster {

namespace {
unexpected bad(const std::string& flag, const std::string& why) {
  return make_unexpected(cluster_errc::invalid_spec, "troupe node: " + flag + ": " + why);
}

bool name_fits_role(const std::string& name, node_role role) {
  if (role == node_role::master || role == node_role::dispenser) return name == to_string(role);
  std::string prefix = std::string(to_string(role)) + "-";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(prefix.size()), name.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}
}  // namespace

expected<void> validate_node_args(const node_args& a) {
  if (auto ok = validate_address(a.join); !ok) return bad("--join", ok.err().context());
  if (!valid_node_name(a.id.name)) return bad("--name", "'" + a.id.name + "' is not a valid node name");
  if (!name_fits_role(a.id.name, a.role))
    return bad("--name", "'" + a.id.name + "' does not fit role " + std::string(to_string(a.role)) +
                             " (expected " + node_name(a.role, 0) + " style)");
  if (a.job_dir.empty()) return bad("--job-dir", "must not be empty");
  return {};
}

std::vector<std::string> node_argv(const node_args& a) {
  std::vector<std::string> argv = {"troupe",        "node",
                                   "--join",        a.join,
                                   "--role",        std::string(to_string(a.role)),
                                   "--name",        a.id.name,
                                   "--incarnation", std::to_string(a.id.incarnation),
                                   "--job-dir",     a.job_dir};
  argv.insert(argv.end(), a.extra.begin(), a.extra.end());
  return argv;
}

node_spec node_launch_spec(const node_args& a, const job_dir& dir, resources need) {
  node_spec s;
  s.id = a.id;
  s.argv = node_argv(a);
  s.env = {{"TROUPE_NODE", a.id.to_string()}};
  s.working_dir = dir.path();
  s.log_file = dir.log_path(a.id.name);
  s.need = need;
  return s;
}

nodes_file make_nodes_file(const std::string& job_id, const membership_view& view,
                           const std::vector<node_handle>& running, std::int64_t now_ms) {
  nodes_file f;
  f.job_id = job_id;
  f.epoch = view.epoch();
  f.updated_ms = now_ms;
  for (const auto& m : view.members()) {
    node_record r{m.id, m.role, 0, 0, m.address, std::string(to_string(m.state))};
    auto h = std::find_if(running.begin(), running.end(), [&](const node_handle& h) { return h.id == m.id; });
    if (h != running.end())
      r.pid = h->pid;
    else if (m.role == node_role::master)
      r.pid = ::getpid();
    if (auto st = read_process_stat(r.pid)) r.start_time = st->start_time;
    if (m.role == node_role::master) f.master_address = m.address;
    f.nodes.push_back(std::move(r));
  }
  return f;
}

}  // namespace troupe::cluster
