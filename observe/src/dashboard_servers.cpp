#include "dashboard_servers.hpp"

#include <algorithm>
#include <optional>

#include "dashboard_jobs.hpp"
#include "server_json.hpp"
#include "troupe/observe/server_state.hpp"

namespace troupe::observe {

using nlohmann::json;

namespace {

// Copies `key` from `from` when it has the type `ok` accepts (a server's file is untrusted).
template <typename Check>
void copy_if(json& to, const json& from, const char* key, Check ok) {
  auto it = from.find(key);
  if (it != from.end() && ok(*it)) to[key] = *it;
}

// serve/<name>/server.json parsed; nullopt with row["error"] saying why not.
std::optional<json> read_server_json(const job_directory& serve_dir, const std::string& name, json& row) {
  auto text = serve_dir.read_all(name + "/server.json", max_json_bytes);
  if (!text) {
    row["error"] = text.err().context();
    return std::nullopt;
  }
  if (!json_depth_within(*text, max_json_depth)) {
    row["error"] = "serve/" + name + "/server.json: nested more than 64 deep";
    return std::nullopt;
  }
  auto j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    row["error"] = "serve/" + name + "/server.json: not JSON (yet)";
    return std::nullopt;
  }
  return j;
}

// The fields the page shows, each copied only when of its type.
void copy_server_fields(json& row, const json& j) {
  auto is_num = [](const json& v) { return v.is_number(); };
  auto is_text = [](const json& v) { return v.is_string(); };
  for (const char* k :
       {"replicas_ready", "replicas_wanted", "requests_per_s", "rows_per_s", "p50_ms", "p99_ms", "restarts",
        "started_ms", "updated_ms", "requests_ok", "requests_failed", "requests_refused", "queue_rows"})
    copy_if(row, j, k, is_num);
  copy_if(row, j, "listen", is_text);
  if (auto m = j.find("model"); m != j.end() && m->is_object()) {
    for (const char* k : {"version", "job_id", "model", "model_dir"}) copy_if(row, *m, k, is_text);
  }
  if (auto s = j.find("swap"); s != j.end() && s->is_object()) {
    json swap;
    for (const char* k : {"state", "version", "error"}) copy_if(swap, *s, k, is_text);
    row["swap"] = swap;
  }
}

// "serve" or "serve-<uid>" (the names cluster::own_subdir gives; observe sits below cluster).
bool servers_dir_name(std::string_view id) {
  return id == "serve" || (id.size() > 6 && id.substr(0, 6) == "serve-" &&
                           id.find_first_not_of("0123456789", 6) == std::string_view::npos);
}

// As `troupe serve status` says it (server_state.hpp); the lock seen through the root's descriptor.
std::string server_state(const job_directory& serve_dir, const std::string& name, const json& j,
                         std::int64_t now_ms) {
  auto state = server_state_of(serve_dir.flock_held(name + "/server.lock"), j, now_ms);
  return state.empty() ? "dead" : state;
}

json server_row(const job_directory& serve_dir, const std::string& name, std::int64_t now_ms) {
  json row = {{"name", name}};
  auto j = read_server_json(serve_dir, name, row);
  if (!j) return row;
  copy_server_fields(row, *j);
  if (row.contains("listen"))
    row["url"] = "http://" + row["listen"].get<std::string>() + "/v2/models/" + name;
  row["state"] = server_state(serve_dir, name, *j, now_ms);
  // Serving no more: its last second's rates are not current (troupe serve status shows 0 too).
  if (row["state"] != "serving")
    for (const char* k : {"requests_per_s", "rows_per_s"})
      if (row.contains(k)) row[k] = 0.0;
  return row;
}

}  // namespace

json servers_json(const jobs_root& root, std::int64_t now_ms) {
  json list = json::array();
  // <root>/serve, and <root>/serve-<uid> of each user whose <root>/serve another user made
  // (cluster::own_subdir).
  auto ids = root.job_ids();
  if (!ids) return {{"servers", list}, {"error", ids.err().context()}};
  std::string error;  // the first servers' directory that could not be listed (the others still are)
  for (const auto& id : *ids) {
    if (!servers_dir_name(id)) continue;
    auto dir = root.job(id);
    // A job that happens to be named "serve" is a job, not the servers' directory.
    if (!dir || dir->open("job.toml")) continue;
    auto names = dir->subdirectories();
    if (!names) {
      if (error.empty()) error = names.err().context();
      continue;
    }
    for (const auto& name : *names) {
      list.push_back(server_row(*dir, name, now_ms));
      if (id != "serve") list.back()["servers_dir"] = id;
    }
  }
  std::sort(list.begin(), list.end(), [](const json& a, const json& b) {
    return a.value("started_ms", 0.0) > b.value("started_ms", 0.0);
  });
  if (!error.empty()) return {{"servers", list}, {"error", error}};
  return {{"servers", list}};
}

}  // namespace troupe::observe
