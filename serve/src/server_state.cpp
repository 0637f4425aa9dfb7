// What a running server tells people and other programs (frontend.hpp): <state>/server.json,
// rewritten every second (the dashboard lists servers from it; `troupe serve reload` finds the
// server through it), and the progress line on stderr, like `troupe run`'s; the latency window both
// read their percentiles from.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "frontend.hpp"
#include "troupe/cluster/job_dir.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/observe/server_state.hpp"

namespace troupe::serve {

using nlohmann::json;

namespace {

std::string absolute_path(const std::string& dir) {
  std::error_code ec;
  auto p = std::filesystem::absolute(dir, ec);
  return ec ? dir : p.lexically_normal().string();
}

json model_state(const model_view& v) {
  return {{"version", v.info.version()},
          {"generation", v.generation},
          {"job_id", v.info.job.id},
          {"created_unix_ms", v.info.created_unix_ms},
          {"model", v.info.model},
          {"model_dir", v.info.dir},
          {"model_path", absolute_path(v.info.dir)},  // for `troupe jobs prune`, from anywhere
          {"serving_since_ms", v.serving_since_ms}};
}

}  // namespace

void latency_window::add(double seconds) {
  std::lock_guard lk(mu_);
  ++seen_;
  // A reservoir of at most 20k samples per interval: percentiles of a busy second stay cheap.
  constexpr std::size_t cap = 20'000;
  if (samples_.size() < cap) {
    samples_.push_back(static_cast<float>(seconds));
  } else {
    static thread_local std::minstd_rand rng{std::random_device{}()};
    std::size_t k = rng() % seen_;
    if (k < cap) samples_[k] = static_cast<float>(seconds);
  }
}

latency_window::summary latency_window::take() {
  std::vector<float> s;
  std::size_t n;
  {
    std::lock_guard lk(mu_);
    s.swap(samples_);
    n = seen_;
    seen_ = 0;
  }
  summary out;
  out.count = n;
  if (s.empty()) return out;
  auto at = [&](double q) {
    auto k = static_cast<std::size_t>(q * static_cast<double>(s.size() - 1));
    std::nth_element(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(k), s.end());
    return static_cast<double>(s[k]);
  };
  out.p50 = at(0.50);
  out.p99 = at(0.99);
  return out;
}

void frontend::update_rates(clock::time_point now, std::uint64_t ok, std::uint64_t rows) {
  // Rates over the time since the last write (about a second).
  double dt =
      last_rate_at_ == clock::time_point{} ? 0 : std::chrono::duration<double>(now - last_rate_at_).count();
  if (dt <= 0.2 && last_rate_at_ != clock::time_point{}) return;
  if (dt > 0) {
    req_rate_ = static_cast<double>(ok - last_ok_) / dt;
    row_rate_ = static_cast<double>(rows - last_rows_) / dt;
    std::unordered_map<std::string, double> seen;  // the kept versions only (serve_metrics)
    for (const auto& [version, total] : metrics_.rows_by_version()) {
      metrics_.set_rate(version, (total - last_version_rows_[version]) / dt);
      seen[version] = total;
    }
    last_version_rows_ = std::move(seen);
    last_latency_ = latencies_.take();
  }
  last_ok_ = ok;
  last_rows_ = rows;
  last_rate_at_ = now;
}

json frontend::replicas_state(const core_stats& stats) {
  // Where each replica runs ("": this machine): the host the launcher chose, or for Slurm, which
  // chooses it, the address the replica's connection comes from.
  std::map<std::string, std::string> hosts;
  {
    std::lock_guard lk(mu_);
    for (const auto& [name, s] : slots_)
      if (s.handle)
        hosts[name] =
            s.handle->host.empty() && settings_.cluster.launcher == "slurm" ? s.peer_host : s.handle->host;
  }
  json replicas = json::array();
  for (const auto& r : stats.replicas)
    replicas.push_back({{"node", r.node},
                        {"incarnation", r.incarnation},
                        {"generation", r.generation},
                        {"state", to_string(r.phase)},
                        {"pid", r.pid},
                        {"host", hosts[r.node]},
                        {"version", r.version},
                        {"placement", r.placement},
                        {"inflight", r.inflight}});
  return replicas;
}

json frontend::swap_state() {
  json swap = nullptr;
  for (const auto& [gen, g] : gens_)
    if (g.state == gen_state::staging) swap = {{"state", "loading"}, {"version", g.info.version()}};
  if (swap.is_null() && !last_swap_error_.empty()) swap = {{"state", "refused"}, {"error", last_swap_error_}};
  return swap;
}

namespace {
// This process's start time (/proc/self/stat), so that `troupe serve stop` signals this server and
// not a process that took its pid later.
std::uint64_t own_start_time() {
  static const std::uint64_t t = [] {
    auto st = cluster::read_process_stat(::getpid());
    return st ? st->start_time : 0;
  }();
  return t;
}

void write_json(const std::string& path, const json& j) {
  (void)cluster::write_file_atomic(path, j.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
}
}  // namespace

// Before the first model serves, and after a first model that could not: server.json names this run
// (an earlier run's "stopped" or "serving" stood there: a server killed while it started read as
// stopped, and `troupe serve status` could not tell a start that failed).
void frontend::write_phase(const char* state) {
  json j = {{"name", name_},
            {"state", state},
            {"pid", ::getpid()},
            {"start_time", own_start_time()},
            {"kernel", observe::kernel_id()},
            {"started_ms", started_ms_},
            {"updated_ms", clock_.wall_ms()}};
  // The model it is to serve, from its start: `troupe jobs prune` keeps that job (it removed it while
  // the server loaded it).
  if (std::string_view(state) == "starting" && !cfg_.model.empty())
    j["model_path"] = absolute_path(cfg_.model);
  write_json(state_dir_ + "/server.json", j);
}

void frontend::write_state(bool final) {
  auto view = current_view();
  if (!view) return;  // nothing serves yet
  std::uint64_t ok = requests_ok_.load(), rows = rows_answered_.load();
  update_rates(clock_.now(), ok, rows);
  auto stats = core_->stats();
  json replicas = replicas_state(stats), swap;
  if (final)  // the replicas are stopped right after this last write
    for (auto& r : replicas) r["state"] = "stopped";
  std::unique_lock lk(mu_);
  const std::uint64_t restarts = restarts_;
  swap = swap_state();
  lk.unlock();
  const char* state = final ? "stopped" : draining_ ? "draining" : "serving";
  json j = {{"name", name_},
            {"state", state},
            {"pid", ::getpid()},
            {"start_time", own_start_time()},
            {"kernel", observe::kernel_id()},
            {"listen", http_ ? http_->address() : ""},
            {"control_address", control_address_},
            {"started_ms", started_ms_},
            {"updated_ms", clock_.wall_ms()},
            {"model", model_state(*view)},
            {"replicas_wanted", cfg_.replicas},
            {"replicas_ready", stats.ready},
            {"replicas", std::move(replicas)},
            {"requests_ok", ok},
            {"requests_failed", requests_failed_.load()},
            {"requests_refused", requests_refused_.load()},
            {"requests_per_s", req_rate_},
            {"rows_per_s", row_rate_},
            {"p50_ms", last_latency_.p50 * 1e3},
            {"p99_ms", last_latency_.p99 * 1e3},
            {"queue_rows", stats.queued_rows},
            {"restarts", restarts},
            {"swap", std::move(swap)}};
  write_json(state_dir_ + "/server.json", j);
}

void frontend::print_progress(bool final) {
  auto view = current_view();
  if (!cfg_.progress || !core_ || !view) return;
  auto now = clock_.now();
  bool tty = ::isatty(STDERR_FILENO);
  if (!final && last_progress_ &&
      now - *last_progress_ < (tty ? std::chrono::milliseconds(900) : std::chrono::seconds(2)))
    return;
  last_progress_ = now;
  auto stats = core_->stats();
  std::string swap;
  {
    std::lock_guard lk(mu_);
    for (const auto& [gen, g] : gens_)
      if (g.state == gen_state::staging) swap = "  loading " + g.info.version();
  }
  double secs = std::chrono::duration<double>(now - started_).count();
  std::fprintf(
      stderr,
      "%s[%6.1fs] %s %s  replicas %zu/%zu  %7.0f req/s  %8.0f rows/s  p50 %.2f ms  p99 %.2f ms  queue %zu  "
      "errors %llu  refused %llu  restarts %llu%s%s",
      tty ? "\r" : "", secs, name_.c_str(), view->info.version().c_str(), stats.ready, cfg_.replicas,
      req_rate_, row_rate_, last_latency_.p50 * 1e3, last_latency_.p99 * 1e3, stats.queued_rows,
      static_cast<unsigned long long>(requests_failed_.load()),
      static_cast<unsigned long long>(requests_refused_.load()), static_cast<unsigned long long>(restarts_),
      swap.c_str(), tty && !final ? "" : "\n");
}

}  // namespace troupe::serve
