#include "local/hosts.hpp"

#include <algorithm>
#include <charconv>
#include <sstream>

#include <spdlog/spdlog.h>

#include "troupe/cluster/errc.hpp"

namespace troupe::cluster::local {

std::vector<std::string> split_words(const std::string& s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

expected<host_slots> parse_host_slots(std::string_view entry) {
  host_slots h;
  auto colon = entry.rfind(':');
  h.name = std::string(entry.substr(0, colon));
  if (colon != std::string_view::npos) {
    auto n = entry.substr(colon + 1);
    auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), h.slots);
    if (ec != std::errc() || end != n.data() + n.size() || h.slots < 1 || h.slots > 4096)
      return make_unexpected(cluster_errc::invalid_spec,
                             "host '" + std::string(entry) + "': slots must be a number in 1..4096");
  }
  if (h.name.empty() || h.name == "localhost" || h.name.find_first_of(" \t\n'\"") != std::string::npos)
    return make_unexpected(cluster_errc::invalid_spec,
                           "host '" + std::string(entry) + "': expected NAME or NAME:SLOTS (not localhost)");
  return h;
}

expected<void> known_host(const remote_hosts& hosts, const std::string& host) {
  if (host == "localhost") return {};
  std::string names;
  for (const auto& h : hosts.hosts) {
    if (h.name == host) return {};
    names.append(names.empty() ? "" : ", ").append(h.name);
  }
  return make_unexpected(cluster_errc::invalid_spec,
                         "host '" + host + "' is not in cluster.hosts (" + names + ")");
}

expected<std::string> pick_host(const remote_hosts& hosts, const std::map<std::string, int>& used,
                                const std::string& wanted, const std::string& node,
                                const std::vector<std::string>& avoid) {
  auto in_use = [&](const std::string& h) {
    auto it = used.find(h);
    return it == used.end() ? 0 : it->second;
  };
  if (!wanted.empty()) {
    if (auto ok = known_host(hosts, wanted); !ok)
      return make_unexpected(cluster_errc::invalid_spec, "node " + node + ": " + ok.err().context());
    // Its slots hold there too (`troupe scale --host h3` put 3 nodes on h3:2): past them the node
    // goes to the first host with a free slot, said so (none free: refused as below).
    bool full = false;
    for (const auto& h : hosts.hosts)
      if (h.name == wanted && in_use(wanted) >= h.slots) {
        full = true;
        spdlog::warn(
            "node {}: every slot of host {} is taken ({}/{}): it goes to another host with a free slot", node,
            wanted, in_use(wanted), h.slots);
      }
    if (!full) return wanted;
  }
  // A host the job's nodes could not reach the master from is the last resort (its slots freed
  // as its nodes were fenced: the replacements went straight back there, and never joined).
  for (const auto& h : hosts.hosts)
    if (in_use(h.name) < h.slots && std::find(avoid.begin(), avoid.end(), h.name) == avoid.end())
      return h.name;
  for (const auto& h : hosts.hosts)
    if (in_use(h.name) < h.slots) return h.name;
  std::string use;
  for (const auto& h : hosts.hosts)
    use.append(use.empty() ? "" : ", ")
        .append(h.name + " " + std::to_string(in_use(h.name)) + "/" + std::to_string(h.slots));
  return make_unexpected(cluster_errc::insufficient_resources,
                         "node " + node + ": every slot of cluster.hosts is taken (" + use + ")");
}

node_spec on_host(const node_spec& spec, const std::string& host, const std::vector<std::string>& command,
                  const std::string& self) {
  node_spec s = spec;
  s.argv.clear();
  for (auto word : command) {
    for (auto at = word.find("{host}"); at != std::string::npos; at = word.find("{host}", at + host.size()))
      word.replace(at, 6, host);
    s.argv.push_back(std::move(word));
  }
  s.program = s.argv.front();
  if (!spec.env.empty() || !spec.inherit_env) {
    s.argv.emplace_back("env");
    if (!spec.inherit_env) s.argv.emplace_back("-i");
    for (const auto& [k, v] : spec.env) s.argv.push_back(k + "=" + v);
  }
  s.argv.push_back(spec.program.empty() ? self : spec.program);
  s.argv.insert(s.argv.end(), spec.argv.begin() + 1, spec.argv.end());
  // The command carries the environment to the other host; the command itself runs with ours.
  s.env.clear();
  s.inherit_env = true;
  s.host = host;
  return s;
}

}  // namespace troupe::cluster::local
