#include "client_timeline.hpp"

#include "troupe/cluster/process.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <optional>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "troupe/cluster/job_dir.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/config.hpp"
#include "troupe/observe/job_events.hpp"

namespace troupe::control {

namespace {

using nlohmann::json;

bool notable(const std::string& kind) {
  return kind != "metrics" && kind != "node_stats" && kind != "job_start";
}

json tasks_of(const observe::job_event* m) {
  auto n = [&](const char* k) { return m ? static_cast<std::uint64_t>(m->number(k)) : 0; };
  return {{"todo", n("tasks_todo")},
          {"doing", n("tasks_doing")},
          {"done", n("tasks_done")},
          {"failed", n("tasks_failed")},
          {"requeued", n("tasks_requeued")}};
}

// The last notable events (membership, re-queues, checkpoints...), at most 20.
json recent_of(const observe::event_read& read) {
  json recent = json::array();
  for (const auto& e : read.events)
    if (notable(e.kind) || (e.kind == "job_start" && !e.text("resumed").empty()))  // a resume: said
      recent.push_back(json::parse(observe::to_json_line(e)));
  if (recent.size() > 20) recent.erase(recent.begin(), recent.end() - 20);
  return recent;
}

// The data epochs the job was given ([train] epochs of its job.toml) and the one it reached: the
// epochs whose every task is done, the last one once the job finished. The timeline's metrics
// carry task counts only.
void add_data_epochs(const std::string& job_dir, bool finished_ok, json& j) {
  std::uint64_t epochs = 1;
  if (auto dir = cluster::job_dir::open(job_dir))
    if (auto text = dir->read_job_toml())
      if (auto doc = config_doc::from_string(*text, dir->job_toml_path())) {
        config_reader r(*doc);
        epochs = static_cast<std::uint64_t>(r.section("train").get_int("epochs", 1, 1, 1 << 20));
      }
  const auto& t = j["tasks"];
  const auto total = t["todo"].get<std::uint64_t>() + t["doing"].get<std::uint64_t>() +
                     t["done"].get<std::uint64_t>() + t["failed"].get<std::uint64_t>();
  const auto per_epoch = total / epochs;
  std::uint64_t reached = per_epoch > 0 ? t["done"].get<std::uint64_t>() / per_epoch : 0;
  if (finished_ok) reached = epochs - 1;
  j["data_epoch"] = std::min(reached, epochs - 1);
  j["data_epochs"] = epochs;
}

// The last few metrics lines of a timeline, newest last (a line torn by a crash is skipped for the
// one before it).
struct last_lines {
  std::array<std::string, 4> lines;
  std::size_t seen = 0;
  void add(std::string_view l) { lines[seen++ % lines.size()].assign(l); }
  std::optional<observe::job_event> newest_event() const {
    for (std::size_t i = 0; i < std::min(seen, lines.size()); ++i)
      if (auto e = observe::from_json_line(lines[(seen - 1 - i) % lines.size()])) return std::move(*e);
    return std::nullopt;
  }
};

// A long job's timeline is mostly metrics and node_stats lines (one a second each): only the
// others are parsed, and the last lines of those two kinds are kept (when asked for).
expected<observe::event_read> read_notable(const std::string& job_dir, last_lines* metrics = nullptr,
                                           last_lines* stats = nullptr) {
  return observe::read_events(job_dir + "/" + observe::events_file_name, 0,
                              [metrics, stats](std::string_view line) {
                                const auto kind = observe::peek_kind(line);
                                if (kind == "metrics" && metrics) metrics->add(line);
                                if (kind == "node_stats" && stats) stats->add(line);
                                return kind != "metrics" && kind != "node_stats";
                              });
}

}  // namespace

namespace {
// Where the node of `n` runs, as a status member's `host` and `slurm_job` (each when known).
void add_place(json& member, const cluster::node_record& n) {
  if (!n.host.empty()) member["host"] = n.host;
  if (n.slurm_job > 0) member["slurm_job"] = n.slurm_job;
}
}  // namespace

json members_json(const cluster::nodes_file& nodes, bool runner_gone) {
  json members = json::array();
  for (const auto& n : nodes.nodes) {
    // "exited" says itself in its exit ("exited with code 0", "killed by SIGKILL").
    std::string state = n.exit.empty() ? n.state : n.state == "exited" ? n.exit : n.state + ": " + n.exit;
    // A node the runner recorded running, its runner gone: nodes die with their runner (PDEATHSIG).
    if (runner_gone && n.exit.empty() && n.state == "running" && n.pid > 0 &&
        !cluster::process_alive(n.pid, n.start_time ? std::optional(n.start_time) : std::nullopt))
      state = "gone (runner died)";
    json m = {{"node", n.id.to_string()},
              {"role", std::string(cluster::to_string(n.role))},
              {"address", n.address},
              {"pid", n.pid},
              {"state", state}};
    add_place(m, n);
    members.push_back(std::move(m));
  }
  return members;
}

void add_placement(json& status, const cluster::job_dir& dir) {
  auto nodes = dir.read_nodes();
  if (!nodes || !status.contains("members")) return;
  std::set<std::string> listed;
  for (auto& m : status["members"]) {
    const auto node = m.value("node", std::string());
    listed.insert(node);
    for (const auto& n : nodes->nodes) {
      if (n.id.to_string() == node) add_place(m, n);
    }
  }
  // Launched but not in the master's view yet (starting, waiting in Slurm's queue, unable to reach
  // the master): listed too (a scale from 2 to 8 showed 2 workers until the others joined).
  for (const auto& n : nodes->nodes) {
    if (n.state != "running" || !n.exit.empty() || listed.count(n.id.to_string())) continue;
    json m = {{"node", n.id.to_string()},
              {"role", std::string(cluster::to_string(n.role))},
              {"address", ""},
              {"pid", n.pid},
              {"state", "launched, not joined"}};
    add_place(m, n);
    status["members"].push_back(std::move(m));
  }
}

void add_recent_events(json& status, const std::string& job_dir) {
  auto read = read_notable(job_dir);
  if (!read || read->events.empty()) return;
  status["recent"] = recent_of(*read);
  status["source"] = observe::events_file_name;
  status["skipped_lines"] = read->skipped;
}

double last_logged_loss(const std::string& job_dir) {
  std::ifstream in(job_dir + "/" + observe::events_file_name, std::ios::binary);
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::streamoff>(in.tellg());
  if (!in || size <= 0) return std::numeric_limits<double>::quiet_NaN();
  const std::streamoff from = std::max<std::streamoff>(0, size - (64 << 10));
  in.seekg(from);
  std::string tail(static_cast<std::size_t>(size - from), '\0');
  in.read(tail.data(), static_cast<std::streamsize>(tail.size()));
  tail.resize(static_cast<std::size_t>(in.gcount()));
  // Newest first; the first line of the tail may be cut (from_json_line refuses it).
  for (auto end = tail.size(); end > 0;) {
    const auto start = tail.rfind('\n', end - 1);
    const auto begin = start == std::string::npos ? 0 : start + 1;
    const std::string line = tail.substr(begin, end - begin);
    end = start == std::string::npos ? 0 : start;
    if (observe::peek_kind(line) != "metrics") continue;
    auto e = observe::from_json_line(line);
    if (!e) continue;
    if (const double loss = e->number("loss", std::numeric_limits<double>::quiet_NaN()); std::isfinite(loss))
      return loss;
  }
  return std::numeric_limits<double>::quiet_NaN();
}

namespace {
// The status fields the last metrics event gives (zeros without one).
void add_metrics(json& j, const observe::job_event* metrics) {
  auto n = [&](const char* k) { return metrics ? metrics->number(k) : 0.0; };
  j["membership_epoch"] = static_cast<std::uint64_t>(n("epoch"));
  j["workers_alive"] = static_cast<std::uint32_t>(n("workers_alive"));
  j["ps_alive"] = 0;
  j["tasks"] = tasks_of(metrics);
  j["samples_per_sec"] = n("samples_per_s");
  j["loss"] = n("loss");
  j["samples_total"] = static_cast<std::uint64_t>(n("samples"));
  j["restarts"] = static_cast<std::uint64_t>(n("restarts"));
  const bool infinite = metrics && metrics->find("noise_scale_infinite");  // |G|^2 at its floor 0
  // The last goodput figures the master wrote (no noise_scale key: none estimated yet, null here).
  if (metrics && (metrics->find("noise_scale") || infinite || metrics->find("goodput")))
    j["goodput"] = {
        {"noise_scale", infinite || !metrics->find("noise_scale") ? json() : json(n("noise_scale"))},
        {"noise_scale_infinite", infinite},
        {"batch", static_cast<std::uint32_t>(n("batch"))},
        {"goodput", n("goodput")},
        {"lr_factor", n("lr_factor")},
        {"progress", n("progress")}};
}

// result.json's fields; `running` (no job_end, events still coming): the master's result.json (it
// has no "status": the runner's has) says the job is over and its runner busy ending it (stopping
// nodes, writing its model), not "unreachable".
void add_result(json& j, const std::string& job_dir, bool running) {
  std::ifstream in(job_dir + "/result.json");
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  auto result = json::parse(text, nullptr, false);
  if (!result.is_discarded()) j["result"] = result;
  if (running && result.is_object() && !result.contains("status")) {
    j["state"] = "ending";
    j["reason"] = std::string("its master finished it (") + (result.value("ok", false) ? "ok" : "not ok") +
                  "): the runner is stopping its nodes and writing its model";
  }
  add_data_epochs(job_dir, result.is_object() && result.value("ok", false), j);
}
}  // namespace

expected<std::string> status_from_timeline(const std::string& job_dir, const error& unreachable) {
  last_lines last_metrics, last_stats;
  auto read = read_notable(job_dir, &last_metrics, &last_stats);
  if (!read) return unreachable;
  const auto parsed = last_metrics.newest_event();
  const observe::job_event* metrics = parsed ? &*parsed : nullptr;
  if (read->events.empty() && !metrics) return unreachable;
  const observe::job_event* end = nullptr;
  std::uint64_t wanted = 0;
  std::uint64_t last_ms = metrics ? metrics->t_ms : 0;
  if (auto s = last_stats.newest_event()) last_ms = std::max(last_ms, s->t_ms);
  for (const auto& e : read->events) {
    last_ms = std::max(last_ms, e.t_ms);
    if (e.kind == "job_end") end = &e;
    if (e.kind == "job_start") end = nullptr;  // a resumed run: the earlier run's end is over
    if (e.kind == "job_start" || e.kind == "scale") wanted = static_cast<std::uint64_t>(e.number("workers"));
  }
  json j;
  j["job"] = std::string(std::filesystem::path(job_dir).filename());
  // No job_end: dead (ended_job_status's word; it read "crashed") once nothing has been written
  // for 15 s (the dashboard's rule), else the
  // runner is alive but did not answer.
  const auto now_ms = troupe::clock::system().wall_ms();
  bool quiet = now_ms - static_cast<std::int64_t>(last_ms) > 15'000;
  j["state"] = end ? end->text("state") : quiet ? "dead" : "unreachable";
  j["source"] = observe::events_file_name;
  add_metrics(j, metrics);
  j["workers_target"] = wanted;
  j["finished"] = end != nullptr;
  add_result(j, job_dir, !end && !quiet);
  // A resumed run not ended: result.json (with its status) is the earlier run's, not this one's.
  if (!end && j.contains("result") && j["result"].is_object() && j["result"].contains("status"))
    j.erase("result");
  j["members"] = json::array();
  if (auto dir = cluster::job_dir::open(job_dir))
    if (auto nodes = dir->read_nodes()) j["members"] = members_json(*nodes, true);
  j["recent"] = recent_of(*read);
  j["skipped_lines"] = read->skipped;
  return j.dump();
}

}  // namespace troupe::control
