// Host faults: kill every node of the job on a host, cut its link for `hold` seconds, throttle
// it, or delay the traffic of every node on it. The host of a node is in nodes.json (the local
// launcher's placement on [cluster] hosts); the actions go through the job's host_fault_command
// (troupe/cluster/host_faults.hpp), delay through each node's transport knob as for a node.
#include <algorithm>
#include <set>

#include "chaos_observe.hpp"
#include "troupe/cluster/host_faults.hpp"

namespace troupe::control {

namespace {

std::vector<cluster::node_record> live_nodes(const std::string& job_dir) {
  std::vector<cluster::node_record> out;
  auto dir = cluster::job_dir::open(job_dir);
  if (!dir) return out;
  auto nodes = dir->read_nodes();
  if (!nodes) return out;
  for (const auto& n : nodes->nodes)
    if (n.state != "exited" && !n.host.empty()) out.push_back(n);
  return out;
}

}  // namespace

expected<void> check_host_faults(const std::vector<fault_spec>& faults, const cluster::cluster_config& cfg) {
  for (const auto& f : faults) {
    auto host = fault_host(f);
    if (!host) continue;
    std::string what = std::string("fault '") + to_string(f.kind) + " " + f.target + "'";
    if (f.kind != fault_kind::delay)
      if (auto t = cluster::host_fault_template(cfg); !t)
        return make_unexpected(core_errc::invalid_argument, what + ": " + t.err().context());
    if (cfg.hosts.empty())
      return make_unexpected(core_errc::invalid_argument, what + ": the job lists no hosts (cluster.hosts)");
    if (!host->empty())
      if (auto c = cluster::check_fault_host(cfg, *host); !c)
        return make_unexpected(core_errc::invalid_argument, what + ": " + c.err().context());
  }
  return {};
}

std::optional<cluster::node_record> host_faults::pick(fault_record& rec, std::mt19937_64& rng) {
  auto nodes = live_nodes(job_dir_);
  std::string host = fault_host(rec.spec).value_or("");
  if (host.empty()) {
    std::set<std::string> hosts;
    for (const auto& n : nodes) hosts.insert(n.host);
    if (hosts.empty()) {
      rec.note = "no host runs a node of the job";
      return std::nullopt;
    }
    host = *std::next(hosts.begin(), std::uniform_int_distribution<long>(0, long(hosts.size()) - 1)(rng));
  }
  rec.host = host;
  std::erase_if(nodes, [&](const cluster::node_record& n) { return n.host != host; });
  if (nodes.empty()) {
    rec.note = "no node of the job on " + host;
    return std::nullopt;
  }
  // Time the recovery of a worker (the node whose loss the job feels first) when there is one.
  std::stable_partition(nodes.begin(), nodes.end(),
                        [](const cluster::node_record& n) { return n.role == cluster::node_role::worker; });
  for (const auto& n : nodes) rec.nodes.push_back(n.id.to_string());
  rec.node = nodes.front().id.to_string();
  rec.pid = nodes.front().pid;
  return nodes.front();
}

void host_faults::inject(fault_record& rec, std::size_t index) {
  const auto& f = rec.spec;
  auto fail = [&](const std::string& step, const error& e) { rec.note = step + " failed: " + e.to_string(); };
  if (f.kind == fault_kind::delay) {
    for (const auto& node : rec.nodes)
      if (auto r = inject_messages(job_dir_, node.substr(0, node.find('#')), 0, f.delay_us,
                                   static_cast<std::uint64_t>(f.hold_s * 1000));
          !r)
        fail("delay " + node, r.err());
    return;
  }
  auto cfg = job_cluster(job_dir_);
  if (!cfg) return fail("job.toml", cfg.err());
  std::string action = f.kind == fault_kind::kill        ? "kill"
                       : f.kind == fault_kind::partition ? "cut"
                                                         : "limit";
  std::string arg = f.kind == fault_kind::kill ? "KILL" : f.kind == fault_kind::throttle ? f.rate : "";
  if (auto r = cluster::run_host_fault(*cfg, action, rec.host, arg, job_dir_); !r)
    return fail(action, r.err());
  auto at = clock_.now() + std::chrono::milliseconds(static_cast<std::int64_t>(f.hold_s * 1000));
  if (f.kind == fault_kind::partition) held_.push_back({rec.host, "heal", "", at, index});
  if (f.kind == fault_kind::throttle) held_.push_back({rec.host, "limit", "off", at, index});
}

void host_faults::undo_due(bool all, std::vector<fault_record>& recs) {
  auto now = clock_.now();
  std::erase_if(held_, [&](const hold& h) {
    if (!all && h.at > now) return false;
    auto cfg = job_cluster(job_dir_);
    auto r =
        cfg ? cluster::run_host_fault(*cfg, h.action, h.host, h.arg, job_dir_) : expected<void>(cfg.err());
    if (!r && h.fault < recs.size())
      recs[h.fault].note +=
          (recs[h.fault].note.empty() ? "" : "; ") + h.action + " failed: " + r.err().to_string();
    return true;
  });
}

}  // namespace troupe::control
