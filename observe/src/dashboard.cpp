#include "troupe/observe/dashboard.hpp"

#include <sys/stat.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "dashboard_cluster.hpp"
#include "troupe/observe/job_events.hpp"

namespace troupe::observe {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

http_response json_response(const json& j, int status = 200) {
  return {status,
          "application/json",
          j.dump(-1, ' ', false, json::error_handler_t::replace),
          {{"Cache-Control", "no-store"}}};
}
http_response error(int status, const std::string& why) {
  return json_response({{"error", why}}, status);
}

bool valid_job_id(const std::string& id) {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

bool valid_node_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-') return false;
  return true;
}

std::string read_file(const fs::path& p, std::size_t max = 16 << 20) {
  std::ifstream in(p, std::ios::binary);
  std::string s;
  if (!in) return s;
  s.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  if (s.size() > max) s.resize(max);
  return s;
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// One job's row of the list, from its events: each call reads only what was appended since the
// last one (a running job's file grows by a few lines a second); a file that shrank is re-read.
struct summary_cache {
  struct entry {
    std::uint64_t size = 0, offset = 0;
    std::int64_t mtime = -1;
    json row;
  };
  std::map<std::string, entry> by_job;

  json row(const fs::path& dir, const std::string& id) {
    auto events = dir / events_file_name;
    struct stat st {};
    bool have = ::stat(events.c_str(), &st) == 0;
    auto& e = by_job[id];
    auto size = have ? static_cast<std::uint64_t>(st.st_size) : 0;
    if (!have || size != e.size || st.st_mtime != e.mtime) {
      if (!have || size < e.offset) e = entry{};
      e.size = size;
      e.mtime = have ? st.st_mtime : -1;
      if (e.row.is_null()) e.row = {{"id", id}};
      if (have) fold(events, e);
    }
    json r = e.row;
    if (!r.contains("ended")) {
      // Running while the runner or the master still write: nodes.json is rewritten as nodes
      // come and go, events at least every few seconds.
      auto nodes = json::parse(read_file(dir / "nodes.json"), nullptr, false);
      std::int64_t last = std::max(r.value("last_ms", std::int64_t{0}),
                                   nodes.is_object() ? nodes.value("updated_ms", std::int64_t{0}) : 0);
      r["state"] = now_ms() - last < 15'000 ? "running" : "crashed";
      if (r.contains("started_ms"))
        r["duration_s"] = static_cast<double>(std::max(last, r["started_ms"].get<std::int64_t>()) -
                                              r["started_ms"].get<std::int64_t>()) /
                          1000.0;
    }
    r.erase("ended");
    r.erase("last_ms");
    return r;
  }

  // Only the kinds a row needs are parsed, and of the metrics only the last (a long job has
  // thousands): a root of many finished jobs lists fast.
  static void fold(const fs::path& events, entry& e) {
    std::string first, last, metrics;
    auto read = read_events(events.string(), e.offset, [&](std::string_view line) {
      if (first.empty()) first = line;
      last = line;
      auto kind = peek_kind(line);
      if (kind == "metrics") metrics = line;
      return kind == "job_start" || kind == "scale" || kind == "job_end";
    });
    if (!read) return;
    e.offset = read->next_offset;
    json& r = e.row;
    if (auto f = from_json_line(first); f && !r.contains("started_ms")) r["started_ms"] = f->t_ms;
    if (auto l = from_json_line(last)) r["last_ms"] = l->t_ms;
    if (auto m = from_json_line(metrics)) read->events.push_back(std::move(*m));
    for (const auto& ev : read->events) {
      if (ev.kind == "job_start") {
        r["strategy"] = ev.text("strategy");
        r["workers_wanted"] = ev.number("workers");
      } else if (ev.kind == "scale") {
        r["workers_wanted"] = ev.number("workers");
      } else if (ev.kind == "metrics") {
        r["workers_alive"] = ev.number("workers_alive");
        r["tasks_done"] = ev.number("tasks_done");
        r["tasks_total"] = ev.number("tasks_todo") + ev.number("tasks_doing") + ev.number("tasks_done");
      } else if (ev.kind == "job_end") {
        r["state"] = ev.text("state");
        r["ended"] = true;
        if (r.contains("started_ms"))
          r["duration_s"] = static_cast<double>(ev.t_ms - r["started_ms"].get<std::uint64_t>()) / 1000.0;
      }
    }
  }
};

json event_json(const job_event& e) {
  return json::parse(to_json_line(e));
}

class dashboard {
 public:
  explicit dashboard(dashboard_options o) : o_(std::move(o)) {}

  http_response operator()(const http_request& r) {
    bool is_api = r.path.rfind("/api/", 0) == 0;
    bool control = r.method == "POST";
    // The page and its chart library hold no job data: served to anyone, so a browser can load
    // them before the page adds ?token= to its API calls.
    if (o_.require_token && is_api && !authorised(r)) return error(401, "the cluster token is required");
    if (!is_api) return control ? error(405, "method not allowed") : file(r);
    if (r.path == "/api/jobs" && r.method == "GET") return jobs();
    if (r.path == "/api/cluster" && r.method == "GET") return cluster();
    // /api/jobs/<id>/<what>[/<node>]
    std::string rest = r.path.substr(std::string("/api/jobs/").size());
    if (r.path.rfind("/api/jobs/", 0) != 0) return error(404, "no such API");
    auto slash = rest.find('/');
    std::string id = rest.substr(0, slash), what = slash == std::string::npos ? "" : rest.substr(slash + 1);
    if (!valid_job_id(id)) return error(400, "bad job id");
    fs::path dir = fs::path(o_.root) / id;
    if (!fs::is_directory(dir)) return error(404, "no job '" + id + "' under " + o_.root);
    if (control) return control_job(dir, what, r);
    if (r.method != "GET") return error(405, "method not allowed");
    if (what == "events") return events(dir, r);
    if (what == "nodes") return raw_json(dir / "nodes.json");
    if (what == "result") return result(dir);
    if (what.rfind("log/", 0) == 0) return log(dir, what.substr(4), r);
    return error(404, "no such API");
  }

 private:
  bool authorised(const http_request& r) const { return has_token(r, o_.token); }

  http_response file(const http_request& r) {
    if (r.method != "GET") return error(405, "method not allowed");
    const embedded_file* f = find_embedded(r.path == "/index.html" ? "/" : r.path);
    if (!f) return error(404, "not found");
    std::string type = f->content_type;
    if (type.rfind("text/", 0) == 0 || type == "application/javascript") type += "; charset=utf-8";
    return {200, type, std::string(f->data, f->size), {{"Cache-Control", "max-age=300"}}};
  }

  http_response jobs() {
    json list = json::array();
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(o_.root, ec)) {
      std::string id = d.path().filename().string();
      if (!d.is_directory() || !valid_job_id(id)) continue;
      if (!fs::exists(d.path() / "job.toml") && !fs::exists(d.path() / events_file_name)) continue;
      list.push_back(cache_.row(d.path(), id));
    }
    std::sort(list.begin(), list.end(), [](const json& a, const json& b) {
      return a.value("started_ms", std::uint64_t{0}) > b.value("started_ms", std::uint64_t{0});
    });
    return json_response({{"root", o_.root}, {"jobs", list}});
  }

  // sacct and sinfo ask slurmctld/slurmdbd: at most once per 2 s, whatever polls.
  http_response cluster() {
    auto now = now_ms();
    if (cluster_at_ms_ == 0 || now - cluster_at_ms_ >= 2000) {
      cluster_ = cluster_json(o_.root, o_.slurm, now);
      cluster_at_ms_ = now;
    }
    return json_response(cluster_.second, cluster_.first);
  }

  http_response events(const fs::path& dir, const http_request& r) {
    std::uint64_t after = 0;
    if (auto q = r.query.find("after"); q != r.query.end())
      after = std::strtoull(q->second.c_str(), nullptr, 10);
    auto read = read_events((dir / events_file_name).string(), after);
    if (!read) return error(500, read.err().to_string());
    json ev = json::array();
    for (const auto& e : read->events) ev.push_back(event_json(e));
    return json_response({{"events", ev}, {"next_offset", read->next_offset}, {"skipped", read->skipped}});
  }

  http_response raw_json(const fs::path& p) {
    auto j = json::parse(read_file(p), nullptr, false);
    if (j.is_discarded()) return error(404, p.filename().string() + " is missing or not JSON yet");
    return json_response(j);
  }

  http_response result(const fs::path& dir) {
    auto j = json::parse(read_file(dir / "result.json"), nullptr, false);
    return json_response({{"result", j.is_discarded() ? json(nullptr) : j}});
  }

  http_response log(const fs::path& dir, const std::string& node, const http_request& r) {
    if (!valid_node_name(node)) return error(400, "bad node name");
    std::size_t bytes = 16 << 10;
    if (auto q = r.query.find("bytes"); q != r.query.end())
      bytes = std::min<std::size_t>(std::strtoul(q->second.c_str(), nullptr, 10), 1 << 20);
    fs::path p = dir / "logs" / (node + ".log");
    std::ifstream in(p, std::ios::binary | std::ios::ate);
    if (!in) return error(404, "no log for node '" + node + "'");
    auto size = static_cast<std::size_t>(in.tellg());
    std::size_t from = size > bytes ? size - bytes : 0;
    in.seekg(static_cast<std::streamoff>(from));
    std::string text(size - from, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    return json_response({{"text", text}});
  }

  // The dashboard's token (the cluster's) or the job's own (<job dir>/token, its transport token).
  bool may_change(const fs::path& dir, const http_request& r) const {
    if (authorised(r)) return true;
    std::string job_token = read_file(dir / "token", 4096);
    while (!job_token.empty() && std::isspace(static_cast<unsigned char>(job_token.back())))
      job_token.pop_back();
    return has_token(r, job_token);
  }

  http_response control_job(const fs::path& dir, const std::string& what, const http_request& r) {
    if (!may_change(dir, r)) return error(401, "changing a job needs the cluster token or the job's token");
    if (!o_.control) return error(501, "this dashboard cannot change jobs");
    int workers = -1;
    if (what == "scale") {
      auto q = r.query.find("workers");
      char* end = nullptr;
      long n = q == r.query.end() ? -1 : std::strtol(q->second.c_str(), &end, 10);
      if (q == r.query.end() || *end != '\0' || n < 0 || n > 10000)
        return error(400, "scale needs workers=N (0..10000)");
      workers = static_cast<int>(n);
    } else if (what != "stop") {
      return error(404, "no such API");
    }
    if (auto res = o_.control(dir.string(), workers); !res) return error(409, res.err().to_string());
    return json_response({{"ok", true}});
  }

  dashboard_options o_;
  summary_cache cache_;
  std::pair<int, json> cluster_;
  std::int64_t cluster_at_ms_ = 0;
};

}  // namespace

http_handler make_dashboard(dashboard_options options) {
  auto d = std::make_shared<dashboard>(std::move(options));
  return [d](const http_request& r) { return (*d)(r); };
}

}  // namespace troupe::observe
