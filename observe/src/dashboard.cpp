#include "troupe/observe/dashboard.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "dashboard_cluster.hpp"
#include "dashboard_jobs.hpp"
#include "dashboard_servers.hpp"
#include "job_files.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/observe/job_events.hpp"

namespace troupe::observe {

using nlohmann::json;

namespace {

// A job's directory holds job.toml or events.jsonl (one that cannot be read still counts: it lists
// with its error); serve/ and the dataset cache hold neither.
bool is_job(const job_directory& dir) {
  auto absent = [&](std::string_view f) {
    auto o = dir.open(f);
    return !o && o.err().code() == std::errc::no_such_file_or_directory;
  };
  return !absent("job.toml") || !absent(events_file_name);
}

// The query's `key` as a whole number (digits only), `fallback` when absent; nullopt when it is
// something else (strtoull read "abc" as 0 and "-1" as 2^64 - 1).
std::optional<std::uint64_t> query_number(const http_request& r, const std::string& key,
                                          std::uint64_t fallback) {
  auto q = r.query.find(key);
  if (q == r.query.end()) return fallback;
  std::uint64_t v = 0;
  const auto& s = q->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

http_response json_response(const json& j, int status = 200) {
  return {status,
          "application/json",
          j.dump(-1, ' ', false, json::error_handler_t::replace),
          {{"Cache-Control", "no-store"}}};
}
http_response error_response(int status, const std::string& why) {
  return json_response({{"error", why}}, status);
}
http_response not_allowed(const char* allow) {
  auto r = error_response(405, std::string("method not allowed (").append(allow).append(")"));
  r.headers.emplace_back("Allow", allow);
  return r;
}
// A file of the job that is missing (404) or refused (422, naming why).
http_response file_error(const error& e) {
  return error_response(e.code() == std::errc::no_such_file_or_directory ? 404 : 422, e.context());
}

bool valid_node_name(const std::string& n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-') return false;
  return true;
}

// The pages show wall-clock times (server.json's updated_ms, squeue's), hence the real clock's.
std::int64_t now_ms() {
  return clock::system().wall_ms();
}

json event_json(const job_event& e) {
  return json::parse(to_json_line(e));
}

// What an API path names: /api/jobs, /api/cluster, /api/jobs/<id>/<what>[/<node>].
struct api_route {
  enum kind_t { none, jobs, servers, cluster, events, nodes, result, log, scale, stop } kind = none;
  std::string id, node;
  bool post() const { return kind == scale || kind == stop; }
  const char* allow() const { return post() ? "POST" : "GET"; }
};

api_route route_of(const std::string& path) {
  api_route r;
  if (path == "/api/jobs") r.kind = api_route::jobs;
  if (path == "/api/cluster") r.kind = api_route::cluster;
  if (path == "/api/servers") r.kind = api_route::servers;
  const std::string prefix = "/api/jobs/";
  if (r.kind != api_route::none || path.rfind(prefix, 0) != 0) return r;
  auto rest = path.substr(prefix.size());
  auto slash = rest.find('/');
  if (slash == std::string::npos) return r;
  r.id = rest.substr(0, slash);
  auto what = rest.substr(slash + 1);
  static const std::pair<const char*, api_route::kind_t> names[] = {{"events", api_route::events},
                                                                    {"nodes", api_route::nodes},
                                                                    {"result", api_route::result},
                                                                    {"scale", api_route::scale},
                                                                    {"stop", api_route::stop}};
  for (auto [name, kind] : names)
    if (what == name) r.kind = kind;
  if (what.rfind("log/", 0) == 0) {
    r.kind = api_route::log;
    r.node = what.substr(4);
  }
  return r;
}

class dashboard {
 public:
  explicit dashboard(dashboard_options o) : o_(std::move(o)) {}
  ~dashboard() {
    if (cluster_thread_.joinable()) cluster_thread_.join();
  }
  dashboard(const dashboard&) = delete;
  dashboard& operator=(const dashboard&) = delete;

  // Called from several server threads at once: the caches hold their own locks.
  http_response operator()(const http_request& r) {
    bool is_api = r.path == "/api" || r.path.rfind("/api/", 0) == 0;
    // The page and its chart library hold no job data: served to anyone, so a browser can load
    // them before the page adds ?token= to its API calls.
    if (o_.require_token && is_api && !authorised(r))
      return error_response(401, "the cluster token is required");
    if (!is_api) return r.method == "GET" ? file(r) : not_allowed("GET");
    auto route = route_of(r.path);
    if (route.kind == api_route::none && !route.id.empty() && !valid_job_id(route.id))
      return error_response(400, "bad job id");
    if (route.kind == api_route::none) return error_response(404, "no such API: " + r.path.substr(0, 200));
    if (r.method != route.allow()) return not_allowed(route.allow());
    if (route.kind == api_route::jobs) return jobs();
    if (route.kind == api_route::cluster) return cluster();
    if (route.kind == api_route::servers) {
      auto root = jobs_root::open(o_.root);
      if (!root) return error_response(503, root.err().context());
      return json_response(servers_json(*root, now_ms()));
    }
    if (!valid_job_id(route.id)) return error_response(400, "bad job id");
    if (route.kind == api_route::log && !valid_node_name(route.node))
      return error_response(400, "bad node name");
    auto root = jobs_root::open(o_.root);
    if (!root) return error_response(503, root.err().context());
    auto dir = root->job(route.id);
    // A directory that is no job (serve/, the dataset cache) is none here either: its "result" was a 200.
    if (!dir || !is_job(*dir)) return error_response(404, "no job '" + route.id + "' under " + o_.root);
    switch (route.kind) {
      case api_route::events:
        return events(*dir, r);
      case api_route::nodes:
        return nodes(*dir);
      case api_route::result:
        return result(*dir);
      case api_route::log:
        return log(*dir, route.node, r);
      default:
        return control_job(*dir, route.id, route.kind == api_route::scale, r);
    }
  }

 private:
  bool authorised(const http_request& r) const { return has_token(r, o_.token); }

  http_response file(const http_request& r) {
    const embedded_file* f = find_embedded(r.path == "/index.html" ? "/" : r.path);
    if (!f) return error_response(404, "not found");
    std::string type = f->content_type;
    if (type.rfind("text/", 0) == 0 || type == "application/javascript") type += "; charset=utf-8";
    return {200, type, std::string(f->data, f->size), {{"Cache-Control", "max-age=300"}}};
  }

  // Every job directory (not a link) holding job.toml or events.jsonl, whatever state they are in:
  // a job whose files cannot be read lists with its error.
  http_response jobs() {
    auto root = jobs_root::open(o_.root);
    if (!root) return error_response(503, root.err().context());
    auto ids = root->job_ids();
    if (!ids) return error_response(503, ids.err().context());
    json list = json::array();
    auto now = now_ms();
    for (const auto& id : *ids) {
      auto dir = root->job(id);
      if (!dir) continue;  // gone, or replaced by something else, since it was listed
      if (!is_job(*dir)) continue;
      list.push_back(rows_.row(*dir, now));
    }
    // Newest first: by its start, or by when its directory was made while it has none.
    auto when = [](const json& j) { return j.value("started_ms", j.value("created_ms", std::uint64_t{0})); };
    std::sort(list.begin(), list.end(), [&](const json& a, const json& b) { return when(a) > when(b); });
    return json_response({{"root", o_.root}, {"jobs", list}});
  }

  // sacct and sinfo ask slurmctld/slurmdbd, which may take seconds (each command is bounded by its
  // runner) or hang while slurmctld restarts: they run on a thread of their own, at most once per
  // 2 s whatever polls. A request waits at most cluster_wait_ms for a refresh, then gets the last
  // answer (its now_ms says how old) or, before the first, 503 with Retry-After.
  http_response cluster() {
    std::unique_lock lk(cluster_mu_);
    bool fresh = cluster_ && now_ms() - cluster_at_ms_ < 2000;
    if (!fresh && !cluster_refreshing_) start_cluster_refresh();
    cluster_done_.wait_for(lk, std::chrono::milliseconds(cluster_wait_ms),
                           [&] { return !cluster_refreshing_; });
    if (cluster_) return json_response(cluster_->second, cluster_->first);
    auto r = json_response({{"slurm", false}, {"why", "asking Slurm (sinfo, sacct): no answer yet"}}, 503);
    r.headers.emplace_back("Retry-After", "1");
    return r;
  }

  // Under cluster_mu_. The previous refresh has cleared cluster_refreshing_, its last step: joining
  // it here waits for its exit only.
  void start_cluster_refresh() {
    if (cluster_thread_.joinable()) cluster_thread_.join();
    cluster_refreshing_ = true;
    cluster_thread_ = std::thread([this] {
      auto root = jobs_root::open(o_.root);
      auto answer = root ? cluster_json(*root, o_.slurm, now_ms())
                         : std::pair<int, json>{503, {{"slurm", false}, {"why", root.err().context()}}};
      std::lock_guard lk(cluster_mu_);
      cluster_ = std::move(answer);
      cluster_at_ms_ = now_ms();
      cluster_refreshing_ = false;
      cluster_done_.notify_all();
    });
  }

  // At most max_events_read bytes of lines per answer; "more" says the page should ask again.
  http_response events(const job_directory& dir, const http_request& r) {
    auto given = query_number(r, "after", 0);
    if (!given) return error_response(400, "after=N: a byte offset in the job's events (digits)");
    std::uint64_t after = *given;
    json ev = json::array();
    auto f = dir.open(events_file_name);
    if (!f && f.err().code() != std::errc::no_such_file_or_directory) return file_error(f.err());
    if (!f) return json_response({{"events", ev}, {"next_offset", 0}, {"skipped", 0}, {"more", false}});
    // Past the end: the file was replaced by a shorter one (a resumed job's, rewritten); from its
    // start, or a page holding the old offset would never see an event again.
    if (after > f->size) after = 0;
    auto text = f->read(after, max_events_read);
    if (!text) return file_error(text.err());
    auto read = parse_event_lines(*text, after);
    std::size_t skipped = read.skipped;
    if (read.next_offset == after && text->size() >= max_events_read) {  // a line longer than a read
      read.next_offset = after + text->size();
      ++skipped;
    }
    for (const auto& e : read.events) ev.push_back(event_json(e));
    return json_response({{"events", ev},
                          {"next_offset", read.next_offset},
                          {"skipped", skipped},
                          {"more", read.next_offset < f->size}});
  }

  http_response nodes(const job_directory& dir) {
    auto j = read_json_file(dir, "nodes.json");
    return j ? json_response(*j) : file_error(j.err());
  }

  http_response result(const job_directory& dir) {
    auto j = read_json_file(dir, "result.json");
    if (j) return json_response({{"result", *j}});
    json out = {{"result", nullptr}};
    if (j.err().code() != std::errc::no_such_file_or_directory) out["error"] = j.err().context();
    return json_response(out);
  }

  http_response log(const job_directory& dir, const std::string& node, const http_request& r) {
    auto given = query_number(r, "bytes", 16 << 10);
    if (!given) return error_response(400, "bytes=N: how much of the log's end (digits)");
    const auto bytes = static_cast<std::size_t>(std::min<std::uint64_t>(*given, 1 << 20));
    auto f = dir.open("logs/" + node + ".log");
    if (!f) return file_error(f.err());
    auto text = f->read(f->size > bytes ? f->size - bytes : 0, bytes);
    if (!text) return file_error(text.err());
    return json_response({{"text", *text}});
  }

  // The dashboard's token (the cluster's) or the job's own (<job dir>/token, its transport token).
  bool may_change(const job_directory& dir, const http_request& r) const {
    if (authorised(r)) return true;
    auto job_token = dir.read_all("token", 4096);
    if (!job_token) return false;
    while (!job_token->empty() && std::isspace(static_cast<unsigned char>(job_token->back())))
      job_token->pop_back();
    return has_token(r, *job_token);
  }

  http_response control_job(const job_directory& dir, const std::string& id, bool scale,
                            const http_request& r) {
    if (!may_change(dir, r))
      return error_response(401, "changing a job needs the cluster token or the job's token");
    if (!o_.control) return error_response(501, "this dashboard cannot change jobs");
    int workers = -1;
    if (scale) {
      // Digits only: strtol read "" (and "%00") as 0, and the job shrank to its minimum.
      // `troupe scale --workers` and [job] workers allow 16,384 (the dashboard said 10,000).
      constexpr std::uint64_t most = 16384;
      auto n = query_number(r, "workers", most + 1);  // absent: out of range
      if (!n || *n > most) return error_response(400, "scale needs workers=N (0..16384)");
      workers = static_cast<int>(*n);
    }
    auto res = o_.control(dir.held_path(), workers, "the dashboard, for " + r.remote);
    if (!res) {  // the error names the directory as it was reached (/proc/self/fd/N): as the user knows it
      std::string text = res.err().to_string();
      const std::string held = dir.held_path(), shown = o_.root + "/" + id;
      for (auto at = text.find(held); at != std::string::npos; at = text.find(held, at + shown.size()))
        text.replace(at, held.size(), shown);
      return error_response(409, text);
    }
    if (scale) {
      json j{{"ok", true}, {"workers", res->workers}};
      if (!res->note.empty()) j["note"] = res->note;
      return json_response(j);
    }
    // Accepted, not done: the runner stops the nodes and exits next; the job's state says when.
    return json_response({{"ok", true}, {"stop", "requested"}}, 202);
  }

  dashboard_options o_;
  job_rows rows_;
  static constexpr int cluster_wait_ms = 1500;
  std::mutex cluster_mu_;
  std::condition_variable cluster_done_;
  std::optional<std::pair<int, json>> cluster_;
  std::int64_t cluster_at_ms_ = 0;  // when cluster_ was answered
  bool cluster_refreshing_ = false;
  std::thread cluster_thread_;  // the last refresh; joined before the next and on destruction
};

}  // namespace

http_handler make_dashboard(dashboard_options options) {
  auto d = std::make_shared<dashboard>(std::move(options));
  return [d](const http_request& r) { return (*d)(r); };
}

}  // namespace troupe::observe
