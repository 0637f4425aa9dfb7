// `troupe serve status`: the servers under a root, from their server.json and lock (a server
// killed by SIGKILL left a server.json saying "serving": status says "dead"). `troupe serve stop`:
// SIGTERM to the one named, as a person would send it, and the wait for its end.
#include "serve_admin.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "command.hpp"
#include "troupe/control/client.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/observe/server_state.hpp"
#include "troupe/serve/serve.hpp"

namespace troupe::cli {
namespace {

struct admin_flags {
  std::string root = "jobs", name;
  bool json = false;
  double timeout_s = 120;
};

// A server's state for people (observe::server_state: the dashboard's words); "unknown" where its
// server.json is missing or unreadable.
std::string state_of(const serve::server_entry& s) {
  auto state = observe::server_state_of_json(s.running, s.server_json, clock::system().wall_ms());
  if (!state.empty()) return state;
  return s.server_json.empty() ? "unknown (no server.json)" : "unknown (server.json unreadable)";
}

// The table's text columns as wide as their longest entry (a version is a job id and a time).
void print_table(const nlohmann::json& all) {
  std::vector<std::array<std::string, 4>> rows;
  std::array<std::size_t, 4> w{4, 5, 6, 7};
  for (const auto& j : all) {
    std::array<std::string, 4> r{
        j["name"].get<std::string>(), j["state"].get<std::string>(), j.value("listen", std::string("-")),
        j.contains("model") && j["model"].is_object() ? j["model"].value("version", "-") : "-"};
    for (std::size_t i = 0; i < 4; ++i) w[i] = std::max(w[i], r[i].size());
    rows.push_back(std::move(r));
  }
  auto width = [&](std::size_t i) { return static_cast<int>(w[i]); };
  std::printf("%-*s %-*s %-*s %-*s %-8s %9s %9s %9s %7s %7s\n", width(0), "NAME", width(1), "STATE", width(2),
              "LISTEN", width(3), "VERSION", "REPLICAS", "REQ/S", "P50 MS", "P99 MS", "ERRORS", "REFUSED");
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const auto& j = all[k];
    const auto& r = rows[k];
    const bool live = r[1] == "serving" || r[1] == "draining";
    const auto replicas =
        std::to_string(j.value("replicas_ready", 0)) + "/" + std::to_string(j.value("replicas_wanted", 0));
    std::printf("%-*s %-*s %-*s %-*s %-8s %9.0f %9.2f %9.2f %7llu %7llu\n", width(0), r[0].c_str(), width(1),
                r[1].c_str(), width(2), r[2].c_str(), width(3), r[3].c_str(), live ? replicas.c_str() : "-",
                live ? j.value("requests_per_s", 0.0) : 0.0, j.value("p50_ms", 0.0), j.value("p99_ms", 0.0),
                j.value("requests_failed", 0ull), j.value("requests_refused", 0ull));
  }
}

int status(const admin_flags& f) {
  quiet_logs();
  // As `troupe jobs` says it (a mistyped --root read "no servers under it", exit 0).
  if (auto r = control::check_jobs_root(f.root); !r) return usage_error(r.err().context());
  nlohmann::json all = nlohmann::json::array();
  for (const auto& s : serve::list_servers(f.root)) {
    if (!f.name.empty() && s.name != f.name) continue;
    auto j = nlohmann::json::parse(s.server_json, nullptr, false);
    if (!j.is_object()) j = nlohmann::json::object();
    j["name"] = s.name;
    j["state"] = state_of(s);
    j["state_dir"] = s.state_dir;
    all.push_back(std::move(j));
  }
  if (!f.name.empty() && all.empty())
    return run_error(
        error(make_error_code(core_errc::io_error),
              "serve status: no server named '" + f.name + "' under " + serve::servers_dir(f.root)));
  if (f.json) return std::printf("%s\n", all.dump().c_str()), 0;
  if (all.empty()) return std::printf("no servers under %s\n", serve::servers_dir(f.root).c_str()), 0;
  print_table(all);
  return 0;
}

int stop(const admin_flags& f) {
  quiet_logs();
  auto name = f.name.empty() ? only_server("stop", f.root) : expected<std::string>(f.name);
  if (!name)
    return name.err() == core_errc::invalid_argument ? usage_error(name.err()) : run_error(name.err());
  auto pid = serve::stop_server(f.root, *name,
                                std::chrono::milliseconds(static_cast<std::int64_t>(f.timeout_s * 1000)));
  if (!pid) return run_error(pid.err());
  std::printf("stopped server %s (pid %d)\n", name->c_str(), *pid);
  return 0;
}

}  // namespace

expected<std::string> only_server(const std::string& command, const std::string& root) {
  std::string listed;
  std::size_t running = 0;
  for (const auto& s : serve::list_servers(root))
    if (s.running) {
      listed += (listed.empty() ? "" : ", ") + s.name;
      ++running;
    }
  if (running == 1) return listed;
  if (running == 0)
    return make_unexpected(core_errc::io_error,
                           "serve " + command + ": no running server under " + serve::servers_dir(root));
  return make_unexpected(core_errc::invalid_argument, "serve " + command + ": several servers run under " +
                                                          serve::servers_dir(root) + " (" + listed +
                                                          "): name one with --name");
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
