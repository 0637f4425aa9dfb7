#include "troupe/cluster/host_faults.hpp"

#include "local/hosts.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/run_tool.hpp"

namespace troupe::cluster {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void replace_all(std::string& word, const std::string& key, const std::string& value) {
  for (auto at = word.find(key); at != std::string::npos; at = word.find(key, at + value.size()))
    word.replace(at, key.size(), value);
}

}  // namespace

expected<std::string> host_fault_template(const cluster_config& cfg) {
  if (cfg.hosts.empty())
    return make_unexpected(
        cluster_errc::invalid_spec,
        "a host fault needs the job's hosts: cluster.hosts is empty (the job runs on one machine)");
  if (!cfg.host_fault_command.empty()) return cfg.host_fault_command;
  auto words = local::split_words(cfg.host_command);
  if (!words.empty() && (words[0] == "hosts.sh" || ends_with(words[0], "/hosts.sh")))
    return words[0] + " {action} {host} {arg}";
  return make_unexpected(cluster_errc::invalid_spec,
                         "a host fault needs cluster.host_fault_command (e.g. \"ssh {host} sudo "
                         "troupe-host-fault {action} {arg}\"): host_command '" +
                             cfg.host_command + "' is not scripts/hosts.sh");
}

expected<void> check_fault_host(const cluster_config& cfg, const std::string& host) {
  std::string names;
  for (const auto& entry : cfg.hosts) {
    auto h = local::parse_host_slots(entry);
    if (!h) return h.err();
    if (h->name == host) return {};
    names.append(names.empty() ? "" : ", ").append(h->name);
  }
  return make_unexpected(cluster_errc::invalid_spec, "unknown host '" + host + "' (cluster.hosts: " +
                                                         (names.empty() ? "none" : names) + ")");
}

std::vector<std::string> host_fault_argv(const std::string& tmpl, const std::string& action,
                                         const std::string& host, const std::string& arg,
                                         const std::string& job_dir) {
  std::vector<std::string> argv;
  for (auto word : local::split_words(tmpl)) {
    replace_all(word, "{action}", action);
    replace_all(word, "{host}", host);
    replace_all(word, "{arg}", arg);
    replace_all(word, "{job_dir}", job_dir);
    if (!word.empty()) argv.push_back(std::move(word));
  }
  return argv;
}

expected<void> run_host_fault(const cluster_config& cfg, const std::string& action, const std::string& host,
                              const std::string& arg, const std::string& job_dir,
                              std::chrono::milliseconds timeout) {
  auto tmpl = host_fault_template(cfg);
  if (!tmpl) return tmpl.err();
  auto argv = host_fault_argv(*tmpl, action, host, arg, job_dir);
  std::string line;
  for (const auto& w : argv) line.append(line.empty() ? "" : " ").append(w);
  if (argv.empty()) return make_unexpected(cluster_errc::invalid_spec, "cluster.host_fault_command is empty");
  auto r = run_tool(argv, "", timeout, 1 << 20);
  if (!r) return std::move(r).err().wrap(line);
  if (r->code != 0)
    return make_unexpected(cluster_errc::launch_failed, line + ": exit code " + std::to_string(r->code) +
                                                            (r->err.empty() ? "" : ": ") + r->err);
  return {};
}

}  // namespace troupe::cluster
