// `troupe serve status`: the servers under a root, from their server.json and lock (a server
// killed by SIGKILL left a server.json saying "serving": status says "dead"). `troupe serve stop`:
// SIGTERM to the one named, as a person would send it, and the wait for its end.
#include "serve_admin.hpp"

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "command.hpp"
#include "troupe/serve/serve.hpp"

namespace troupe::cli {
namespace {

struct admin_flags {
  std::string root = "jobs", name;
  bool json = false;
  double timeout_s = 120;
};

// A server's state for people: serving or stopped as it wrote; "dead" where it wrote serving and no
// longer runs (SIGKILL, the OOM killer, a crash); "starting" while it runs and has written nothing
// of this run yet (its first model loading).
std::string state_of(const serve::server_entry& s, const nlohmann::json& j) {
  const std::string written = j.is_object() ? j.value("state", "") : "";
  if (s.running) return written == "serving" ? "serving" : "starting";
  if (written == "serving") return "dead";
  return written.empty() ? "never started" : written;
}

int status(const admin_flags& f) {
  quiet_logs();
  nlohmann::json all = nlohmann::json::array();
  for (const auto& s : serve::list_servers(f.root)) {
    if (!f.name.empty() && s.name != f.name) continue;
    auto j = nlohmann::json::parse(s.server_json, nullptr, false);
    if (!j.is_object()) j = nlohmann::json::object();
    j["name"] = s.name;
    j["state"] = state_of(s, j);
    j["state_dir"] = s.state_dir;
    all.push_back(std::move(j));
  }
  if (!f.name.empty() && all.empty())
    return usage_error("serve status: no server named '" + f.name + "' under " + serve::servers_dir(f.root));
  if (f.json) return std::printf("%s\n", all.dump().c_str()), 0;
  if (all.empty()) return std::printf("no servers under %s\n", serve::servers_dir(f.root).c_str()), 0;
  std::printf("%-16s %-13s %-22s %-26s %-8s %9s %9s %9s %7s %7s\n", "NAME", "STATE", "LISTEN", "VERSION",
              "REPLICAS", "REQ/S", "P50 MS", "P99 MS", "ERRORS", "REFUSED");
  for (const auto& j : all) {
    const bool live = j["state"] == "serving";
    const auto version = j.contains("model") ? j["model"].value("version", "-") : "-";
    const auto replicas =
        std::to_string(j.value("replicas_ready", 0)) + "/" + std::to_string(j.value("replicas_wanted", 0));
    std::printf("%-16s %-13s %-22s %-26s %-8s %9.0f %9.2f %9.2f %7llu %7llu\n",
                j["name"].get<std::string>().c_str(), j["state"].get<std::string>().c_str(),
                j.value("listen", std::string("-")).c_str(), version.c_str(), live ? replicas.c_str() : "-",
                live ? j.value("requests_per_s", 0.0) : 0.0, j.value("p50_ms", 0.0), j.value("p99_ms", 0.0),
                j.value("requests_failed", 0ull), j.value("requests_refused", 0ull));
  }
  return 0;
}

int stop(const admin_flags& f) {
  quiet_logs();
  const std::string name = f.name.empty() ? only_server("stop", f.root) : f.name;
  if (name.empty()) return 2;
  auto pid = serve::stop_server(f.root, name,
                                std::chrono::milliseconds(static_cast<std::int64_t>(f.timeout_s * 1000)));
  if (!pid) return pid.err() == core_errc::invalid_argument ? usage_error(pid.err()) : run_error(pid.err());
  std::printf("stopped server %s (pid %d)\n", name.c_str(), *pid);
  return 0;
}

}  // namespace

std::string only_server(const std::string& command, const std::string& root) {
  std::string listed;
  std::size_t running = 0;
  for (const auto& s : serve::list_servers(root))
    if (s.running) {
      listed += (listed.empty() ? "" : ", ") + s.name;
      ++running;
    }
  if (running == 1) return listed;
  usage_error(running == 0 ? "serve " + command + ": no running server under " + serve::servers_dir(root)
                           : "serve " + command + ": several servers run under " + serve::servers_dir(root) +
                                 " (" + listed + "): name one with --name");
  return {};
}

std::function<std::optional<int>()> add_serve_admin(CLI::App& serve) {
  auto f = std::make_shared<admin_flags>();
  auto* st =
      serve.add_subcommand("status", "List the servers under the root: state, address, version, rates");
  st->add_option("--name", f->name, "only this server");
  st->add_option("--root", f->root, "the jobs root (default jobs)");
  st->add_flag("--json", f->json, "a JSON array of their server.json, with the state as read now");
  auto* sp =
      serve.add_subcommand("stop", "Stop a running server (SIGTERM: drain_ms, then its replicas stop)");
  sp->add_option("--name", f->name,
                 "the server's model name (default: the only running server under the root)");
  sp->add_option("--root", f->root, "the jobs root (default jobs)");
  sp->add_option("--timeout", f->timeout_s, "seconds to wait for it to end (default 120)")
      ->check(CLI::Range(0.1, 86400.0));
  return [f, st, sp]() -> std::optional<int> {
    if (st->parsed()) return status(*f);
    if (sp->parsed()) return stop(*f);
    return std::nullopt;
  };
}

}  // namespace troupe::cli
