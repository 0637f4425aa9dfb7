#include "troupe/observe/timeline.hpp"

#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include <spdlog/spdlog.h>

namespace troupe::observe {

namespace {

job_event make(std::string kind) {
  job_event e;
  e.kind = std::move(kind);
  return e;
}

std::int64_t as_int(std::uint64_t v) {
  return static_cast<std::int64_t>(v);
}

}  // namespace

job_timeline::job_timeline(const std::string& job_dir)
    : path_(job_dir.empty() ? std::string() : job_dir + "/" + events_file_name) {}

job_timeline::~job_timeline() = default;

void job_timeline::open(const std::string& job_dir) {
  std::lock_guard lk(mu_);
  path_ = job_dir.empty() ? std::string() : job_dir + "/" + events_file_name;
  log_.reset();
  warned_ = false;
}

void job_timeline::append(job_event e, bool durable) {
  std::lock_guard lk(mu_);
  if (path_.empty()) return;
  if (!log_) {
    auto l = event_log::open(path_);
    if (!l) {
      if (!warned_) spdlog::warn("timeline: {} (events are dropped)", l.err().to_string());
      warned_ = true;
      return;
    }
    log_ = std::move(*l);
  }
  if (auto r = log_->append(std::move(e), durable); !r) {
    if (!warned_) spdlog::warn("timeline: {} (events are dropped)", r.err().to_string());
    warned_ = true;
  }
}

void job_timeline::job_start(const std::string& strategy, std::uint64_t workers, std::uint64_t min_workers,
                             std::uint64_t max_workers, const std::string& model,
                             const std::string& resumed) {
  auto e = make("job_start");
  e.fields = {{"strategy", strategy},
              {"workers", as_int(workers)},
              {"min_workers", as_int(min_workers)},
              {"max_workers", as_int(max_workers)},
              {"model", model},
              {"pid", std::int64_t{::getpid()}}};
  if (!resumed.empty()) {
    e.fields.emplace_back("resumed", resumed);
    e.fields.emplace_back("cause", resumed == "dead" ? "resumed: the earlier run's runner died"
                                                     : "resumed: the earlier run " + resumed);
  }
  append(std::move(e), true);
}

void job_timeline::membership(const std::string& kind, const std::string& node, std::uint64_t epoch,
                              const std::string& cause) {
  auto e = make(kind);
  e.fields = {{"node", node}, {"epoch", as_int(epoch)}};
  if (!cause.empty()) e.fields.emplace_back("cause", cause);
  append(std::move(e));
}

void job_timeline::node_event(const std::string& kind, const std::string& node, const std::string& cause) {
  auto e = make(kind);
  e.fields = {{"node", node}, {"cause", cause}};
  append(std::move(e));
}

void job_timeline::requeue(const std::string& holder, std::uint64_t tasks, const std::string& cause) {
  auto e = make("requeue");
  e.fields = {{"node", holder}, {"tasks", as_int(tasks)}, {"cause", cause}};
  append(std::move(e));
}

void job_timeline::quarantine(std::uint64_t task, const std::string& error) {
  auto e = make("quarantine");
  e.fields = {{"task", as_int(task)}, {"cause", error}};
  append(std::move(e));
}

void job_timeline::checkpoint(const std::string& node, std::uint64_t version, bool full) {
  auto e = make("checkpoint");
  e.fields = {{"node", node}, {"version", as_int(version)}, {"full", full}};
  append(std::move(e));
}

void job_timeline::scale(std::uint64_t workers, std::uint64_t requested) {
  auto e = make("scale");
  e.fields = {{"workers", as_int(workers)}, {"requested", as_int(requested)}};
  append(std::move(e));
}

void job_timeline::model_init(const std::string& from, const std::string& state, std::uint64_t step) {
  auto e = make("init");
  e.fields = {{"from", from}, {"state", state}, {"step", as_int(step)}};
  append(std::move(e));
}

void job_timeline::model_exported(const std::string& dir, double seconds) {
  auto e = make("model");
  e.fields = {{"dir", dir}, {"seconds", seconds}};
  append(std::move(e));
}

namespace {
// B_noise, or noise_scale_infinite: true while |G|^2 sits at its floor 0 (JSON has no infinity).
// NaN (no estimate yet, or not a number): neither key.
void add_noise_scale(job_event& e, double noise_scale) {
  if (std::isinf(noise_scale))
    e.fields.emplace_back("noise_scale_infinite", true);
  else if (!std::isnan(noise_scale))
    e.fields.emplace_back("noise_scale", noise_scale);
}
}  // namespace

void job_timeline::metrics(const metrics_sample& m) {
  auto e = make("metrics");
  e.fields = {{"samples", as_int(m.samples)},
              {"samples_per_s", m.samples_per_s},
              {"workers_alive", as_int(m.workers_alive)},
              {"epoch", as_int(m.epoch)},
              {"restarts", as_int(m.restarts)},
              {"tasks_todo", as_int(m.tasks_todo)},
              {"tasks_doing", as_int(m.tasks_doing)},
              {"tasks_done", as_int(m.tasks_done)},
              {"tasks_failed", as_int(m.tasks_failed)},
              {"tasks_requeued", as_int(m.tasks_requeued)}};
  if (m.loss) e.fields.emplace_back("loss", *m.loss);
  if (m.goodput) {
    add_noise_scale(e, m.goodput->noise_scale);
  }
  if (m.goodput && m.goodput->ring) {  // async_ps: no global batch, goodput or scaled rate (0 read as one)
    e.fields.emplace_back("batch", m.goodput->batch);
    e.fields.emplace_back("goodput", m.goodput->goodput);
    e.fields.emplace_back("lr_factor", m.goodput->lr_factor);
    e.fields.emplace_back("progress", m.goodput->progress);
  }
  append(std::move(e));
}

void job_timeline::batch_chosen(const batch_choice& c) {
  auto e = make("batch");
  e.fields = {{"choice", as_int(c.choice)},
              {"batch", as_int(c.batch)},
              {"from", as_int(c.from)},
              {"local_batch", as_int(c.local_batch)},
              {"accum_steps", as_int(c.accum_steps)},
              {"replicas", as_int(c.replicas)},
              {"predicted_goodput", c.predicted_goodput},
              {"previous_goodput", c.previous_goodput},
              {"at_progress", c.at_progress}};
  add_noise_scale(e, c.noise_scale);
  append(std::move(e));
}

void job_timeline::batch_measured(std::uint64_t choice, std::uint64_t batch, double measured_goodput,
                                  double predicted_goodput) {
  auto e = make("batch_measured");
  e.fields = {{"choice", as_int(choice)},
              {"batch", as_int(batch)},
              {"measured_goodput", measured_goodput},
              {"predicted_goodput", predicted_goodput}};
  append(std::move(e));
}

void job_timeline::node_stats(const std::string& node, double cpu_percent, std::uint64_t rss_bytes) {
  auto e = make("node_stats");
  e.fields = {{"node", node}, {"cpu_percent", cpu_percent}, {"rss_bytes", as_int(rss_bytes)}};
  append(std::move(e));
}

void job_timeline::job_end(const std::string& state, const std::string& why) {
  auto e = make("job_end");
  e.fields = {{"state", state}};
  if (!why.empty()) e.fields.emplace_back("cause", why);
  append(std::move(e), true);
}

process_sampler::process_sampler(int pid, troupe::clock& clk) : pid_(pid), clock_(clk) {}

std::optional<process_sample> process_sampler::sample() {
  std::string base = "/proc/" + (pid_ == 0 ? std::string("self") : std::to_string(pid_));
  std::ifstream stat(base + "/stat"), statm(base + "/statm");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
  auto close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream in(line.substr(close + 2));
  std::string field;
  std::uint64_t utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  std::uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double cpu_s = static_cast<double>(utime + stime) / tick;
  auto now = clock_.now();
  process_sample s;
  s.rss_bytes = resident * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  if (last_cpu_s_ >= 0) {
    double wall = std::chrono::duration<double>(now - last_).count();
    if (wall > 0) s.cpu_percent = 100.0 * (cpu_s - last_cpu_s_) / wall;
  }
  last_cpu_s_ = cpu_s;
  last_ = now;
  return s;
}

node_stats_reporter::node_stats_reporter(const std::string& job_dir, std::string node, report_pace pace)
    : timeline_(job_dir) {
  thread_ = std::thread([this, node = std::move(node), pace] {
    auto& clk = clock::system();
    process_sampler self(0, clk);
    (void)self.sample();  // the baseline: figures are per interval
    const auto started = clk.now();
    std::unique_lock lk(mu_);
    while (!cv_.wait_for(lk, pace.at(clk.now() - started), [this] { return stop_; }))
      if (auto s = self.sample()) timeline_.node_stats(node, s->cpu_percent, s->rss_bytes);
  });
}

node_stats_reporter::~node_stats_reporter() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace troupe::observe
