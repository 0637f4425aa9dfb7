#include "dashboard_jobs.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "troupe/observe/job_events.hpp"

namespace troupe::observe {

using nlohmann::json;

namespace {

bool missing(const error& e) {
  return e.code() == std::errc::no_such_file_or_directory;
}

// A number of a document the job wrote (any type may be there).
double number_or(const json& j, const char* key, double fallback) {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : fallback;
}

// A count as an integer (the rows read 8118.0, and 2.0 beside a 0).
std::int64_t count_of(double v) {
  return static_cast<std::int64_t>(std::llround(v));
}

}  // namespace

expected<json> read_json_file(const job_directory& dir, const std::string& name) {
  auto text = dir.read_all(name, max_json_bytes);
  if (!text) return std::move(text).err();
  if (!json_depth_within(*text, max_json_depth))
    return make_unexpected(core_errc::parse_error, dir.id() + "/" + name + ": nested more than " +
                                                       std::to_string(max_json_depth) + " deep");
  auto j = json::parse(*text, nullptr, false);
  if (j.is_discarded())
    return make_unexpected(core_errc::parse_error, dir.id() + "/" + name + ": not JSON (yet)");
  return j;
}

json job_rows::row(const job_directory& dir, std::int64_t now_ms) {
  std::string problem;
  json r = events_row(dir, problem);
  if (!problem.empty()) r["error"] = problem;
  if (r.contains("ended")) {
    add_result(dir, r);
    r["workers_alive"] = 0;  // its last metrics counted the workers before it ended
  } else if (auto res = read_json_file(dir, "result.json");
             !r.contains("started_ms") && res && res->is_object() && problem.empty()) {
    // Over without a timeline: `train --local`'s model directory (it keeps none). A job with a
    // timeline and a result.json but no end since its last start is a resumed run (the result is
    // the earlier run's).
    r["state"] = res->value("status", res->value("ok", false) ? "finished" : "failed");
    add_result(dir, r);
  } else if (problem.empty()) {
    add_liveness(dir, r, now_ms, res && res->is_object() ? &*res : nullptr);
  }
  r.erase("ended");
  r.erase("last_ms");
  // No timeline yet (a job preparing its data): when its directory was made, for the list's order
  // (it sorted as the oldest, last of a list otherwise newest first).
  struct stat st {};
  if (!r.contains("started_ms") && ::stat((dir.held_path() + "/job.toml").c_str(), &st) == 0)
    r["created_ms"] = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1000 + st.st_mtim.tv_nsec / 1'000'000;
  return r;
}

// The row folded from events.jsonl so far, read on from where the last listing stopped (from the
// start when the file was replaced or truncated).
json job_rows::events_row(const job_directory& dir, std::string& problem) {
  auto f = dir.open(events_file_name);
  std::lock_guard lk(mu_);
  auto& e = by_job_[dir.id()];
  if (!f) {
    e = entry{};
    if (!missing(f.err())) problem = f.err().context();
  } else {
    if (f->inode != e.inode || f->size < e.offset) e = entry{};
    e.inode = f->inode;
    if (e.row.is_null()) e.row = {{"id", dir.id()}};
    if (e.offset < f->size) {
      auto text = f->read(e.offset, max_events_read);
      if (text)
        fold(*text, e);
      else
        problem = text.err().context();
    }
  }
  if (e.row.is_null()) e.row = {{"id", dir.id()}};
  return e.row;
}

namespace {
// Whether the host of "host:port" is an IPv4 address of this machine (loopback, or an interface's:
// a hosts job's runner advertises the address its hosts reach, 10.78.0.1 in the test cluster).
bool this_machine(std::string_view address) {
  const auto host = std::string(address.substr(0, address.rfind(':')));
  if (host.rfind("127.", 0) == 0) return true;
  in_addr want{};
  if (::inet_pton(AF_INET, host.c_str(), &want) != 1) return false;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return false;
  bool found = false;
  for (auto* i = list; i && !found; i = i->ifa_next)
    found = i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == want.s_addr;
  ::freeifaddrs(list);
  return found;
}
}  // namespace

// Running while the runner or the master still write: nodes.json is rewritten as nodes come and go,
// events at least every few seconds.
// A runner that holds the job's lock runs it, however long it is silent (it may wait for another
// job's import of its dataset: "crashed" after 2 s; the word is now "dead", as troupe status says);
// on a filesystem whose locks this host cannot see (a Slurm runner elsewhere) the writes tell. A
// runner on this machine (nodes.json's runner_address: loopback, or an address of one of its
// interfaces, as a hosts job's is) whose lock nobody holds is gone now (it read "running" for the
// 15 s of writes its nodes made as they died).
void job_rows::add_liveness(const job_directory& dir, json& r, std::int64_t now_ms, const json* result) {
  auto nodes = read_json_file(dir, "nodes.json");
  double last = std::max(number_or(r, "last_ms", 0), nodes ? number_or(*nodes, "updated_ms", 0) : 0);
  const auto runner = nodes && nodes->is_object() ? nodes->value("runner_address", json()) : json();
  const bool here = runner.is_string() && this_machine(runner.get<std::string>());
  const bool writing = !here && static_cast<double>(now_ms) - last < 15'000;
  if (dir.runner_alive()) {
    r["state"] = nodes ? "running" : "starting";
    // The master's result.json alone (the runner adds "status" as it ends): the runner is ending it,
    // as `troupe status` says (the list said "running").
    if (result && !result->contains("status")) r["state"] = "ending";
  } else if (writing)
    r["state"] = "running";
  else {
    r["state"] = "dead";
    r["workers_alive"] = 0;
    r["reason"] =
        "no runner holds it and it left no result.json (its runner died?): continue it with "
        "troupe run --resume <its job directory>";
  }
  if (r.contains("started_ms"))
    r["duration_s"] = std::max(0.0, last - number_or(r, "started_ms", 0)) / 1000.0;
}

// Only the kinds a row needs are parsed, and of the metrics only the last (a long job has
// thousands): a root of many finished jobs lists fast.
void job_rows::fold(const std::string& text, entry& e) {
  std::string first, last, metrics;
  auto read = parse_event_lines(text, e.offset, [&](std::string_view line) {
    if (first.empty()) first = line;
    last = line;
    auto kind = peek_kind(line);
    if (kind == "metrics") metrics = line;
    return kind == "job_start" || kind == "scale" || kind == "job_end";
  });
  // A line longer than a whole read is nobody's event: passed over.
  e.offset = read.next_offset == e.offset && text.size() >= max_events_read ? e.offset + text.size()
                                                                            : read.next_offset;
  json& r = e.row;
  if (auto f = from_json_line(first); f && !r.contains("started_ms")) r["started_ms"] = f->t_ms;
  if (auto l = from_json_line(last)) r["last_ms"] = l->t_ms;
  if (auto m = from_json_line(metrics)) read.events.push_back(std::move(*m));
  for (const auto& ev : read.events) {
    if (ev.kind == "job_start") {
      for (const char* k : {"ended", "state", "reason", "duration_s"}) r.erase(k);  // a resumed run
      r["strategy"] = ev.text("strategy");
      r["workers_wanted"] = count_of(ev.number("workers"));
    } else if (ev.kind == "scale") {
      r["workers_wanted"] = count_of(ev.number("workers"));
    } else if (ev.kind == "metrics") {
      r["workers_alive"] = count_of(ev.number("workers_alive"));
      r["tasks_done"] = count_of(ev.number("tasks_done"));
      r["tasks_total"] =
          count_of(ev.number("tasks_todo") + ev.number("tasks_doing") + ev.number("tasks_done"));
    } else if (ev.kind == "job_end") {
      r["state"] = ev.text("state");
      r["ended"] = true;
      if (r.contains("started_ms"))
        r["duration_s"] =
            std::max(0.0, static_cast<double>(ev.t_ms) - number_or(r, "started_ms", 0)) / 1000.0;
    }
  }
}

// An ended job's progress is its result's (the last metrics sample may be a second older than the
// end): result.json is written just after job_end, so it is looked for on every listing.
void job_rows::add_result(const job_directory& dir, json& r) {
  auto res = read_json_file(dir, "result.json");
  if (!res) {
    if (!missing(res.err()) && !r.contains("error")) r["error"] = res.err().context();
    return;
  }
  // A job refused as it started (a [cluster] setting its launcher could not use) has a reason and a
  // strategy but no tasks and no job_start event: the row said neither.
  if (res->contains("reason") && (*res)["reason"].is_string()) r["reason"] = (*res)["reason"];
  if (!r.contains("strategy") && res->contains("strategy") && (*res)["strategy"].is_string())
    r["strategy"] = (*res)["strategy"];
  double done = number_or(*res, "tasks_done", -1), failed = number_or(*res, "tasks_failed", 0);
  if (done < 0) return;
  r["tasks_done"] = count_of(done);
  r["tasks_total"] = count_of(std::max(number_or(r, "tasks_total", 0), done + failed));
}

}  // namespace troupe::observe
