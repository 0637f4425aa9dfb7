#include "master_observer.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "troupe/core/clock.hpp"
#include "troupe/wire/job_token.hpp"

namespace troupe::actors {

namespace {

constexpr auto cause_wait = std::chrono::seconds(2);
constexpr const char* step_help = "Time per training step (per worker report)";
constexpr const char* recovery_help = "From a worker's death until the workers are back to their number";
constexpr const char* preemptions_help = "Workers preempted by the cluster";
constexpr const char* failures_help = "Workers that died or were preempted";

// The cause is the runner's exit report, or, when none came (the job ending stops the reports,
// or the master with it), the master's own: a node that told it it leaves ("left on SIGTERM",
// membership_client.cpp) left.
std::string departure_kind(const std::string& status) {
  if (status.find("PREEMPTED") != std::string::npos) return "preempted";
  if (status.find("exited with code 0") != std::string::npos) return "leave";
  if (status.rfind("left ", 0) == 0) return "leave";
  return "died";
}

const std::vector<double>& step_buckets() {
  static const auto b = observe::exponential_buckets(0.001, 2, 14);  // 1 ms .. 8 s
  return b;
}
const std::vector<double>& recovery_buckets() {
  static const auto b = observe::exponential_buckets(0.1, 2, 10);  // 0.1 s .. 51 s
  return b;
}

}  // namespace

master_observer::master_observer(const job::job_spec& spec, const std::string& job_dir,
                                 const std::string& job_id, const std::string& address, troupe::clock& clk)
    : clock_(clk),
      started_(clk.now()),
      timeline_(job_dir),
      labels_{{"job", job_id}, {"node", "master"}, {"role", "master"}} {
  // Every family from the start, so a scrape sees them before the first step or death.
  metrics_.get_histogram("troupe_step_seconds", step_help, step_buckets(), labels_);
  metrics_.get_histogram("troupe_recovery_seconds", recovery_help, recovery_buckets(), labels_);
  metrics_.get_counter("troupe_preemptions_total", preemptions_help, labels_);
  metrics_.get_counter("troupe_worker_failures_total", failures_help, labels_);
  start_metrics(spec, job_dir, address.substr(0, address.rfind(':')));
  if (!job_dir.empty()) choices_.read(job_dir + "/" + observe::events_file_name);
}

master_observer::~master_observer() {
  for (const auto& d : pending_) write_departure(d, kind_of(d));
}

std::string master_observer::kind_of(const departure& d) const {
  auto kind = departure_kind(d.reason);
  return d.after_finish && kind == "died" ? "leave" : kind;
}

void master_observer::start_metrics(const job::job_spec& spec, const std::string& job_dir,
                                    const std::string& own_host) {
  const auto& c = spec.cluster;
  if (c.metrics_port < 0) return;
  // No host: the master's own (loopback for a local job; its host's with Slurm or other hosts, where
  // the runner's nodes.json says to scrape it).
  const std::string host =
      c.metrics_host.empty() ? (own_host.empty() ? "127.0.0.1" : own_host) : c.metrics_host;
  observe::http_options o;
  o.listen = host + ":" + std::to_string(c.metrics_port);
  std::string token;
  if (!observe::is_loopback(host)) {
    auto t = wire::read_job_token(job_dir);
    if (!t) return spdlog::warn("/metrics not served: {}", t.err().to_string());
    token = *t;
  }
  auto handler = [this, token](const observe::http_request& r) {
    if (!token.empty() && !observe::has_token(r, token))
      return observe::http_response{
          401,
          "text/plain",
          "the job's token is required (Authorization: Bearer <the job directory's token file>)\n",
          {}};
    if (r.path != "/metrics") return observe::http_response{404, "text/plain", "only /metrics here\n", {}};
    return observe::http_response{200, "text/plain; version=0.0.4; charset=utf-8", metrics_.render(), {}};
  };
  auto s = observe::http_server::start(o, handler);
  if (!s) return spdlog::warn("/metrics not served: {}", s.err().to_string());
  server_ = std::move(*s);
  spdlog::info("Prometheus metrics at http://{}/metrics", server_->address());
}

std::string master_observer::metrics_address() const {
  return server_ ? server_->address() : std::string();
}

void master_observer::joined(const cluster::member& m, const cluster::membership_view& view) {
  timeline_.membership("join", m.id.to_string(), view.epoch());
  if (m.role != cluster::node_role::worker) return;
  workers_alive_ = view.count(cluster::node_role::worker, cluster::member_state::alive);
  if (recovering_since_ && workers_alive_ >= recovery_target_) {
    metrics_.get_histogram("troupe_recovery_seconds", recovery_help, recovery_buckets(), labels_)
        .observe(std::chrono::duration<double>(clock_.now() - *recovering_since_).count());
    recovering_since_.reset();
  }
}

void master_observer::gone(const node_id& id, bool worker, const std::string& reason, std::uint64_t epoch) {
  departure d;
  d.node = id.to_string();
  d.reason = reason;
  d.worker = worker;
  d.epoch = epoch;
  d.t_ms = static_cast<std::uint64_t>(clock_.wall_ms());
  d.seen = clock_.now();
  d.after_finish = job_finished_;
  last_progress_.erase(id.to_string());
  // The runner's exit report came first: the cause is known.
  if (reason.rfind("exited with", 0) == 0 || reason.rfind("killed by", 0) == 0)
    write_departure(d, kind_of(d));
  else
    pending_.push_back(std::move(d));
}

void master_observer::exit_reported(const node_id& id, const std::string& status) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [&](const departure& d) { return d.node == id.to_string(); });
  if (it == pending_.end()) return;
  auto d = std::move(*it);
  pending_.erase(it);
  d.reason = status;
  write_departure(d, kind_of(d));
}

void master_observer::write_departure(const departure& d, const std::string& kind) {
  observe::job_event e;
  e.t_ms = d.t_ms;
  e.kind = kind;
  e.fields = {{"node", d.node}, {"epoch", static_cast<std::int64_t>(d.epoch)}, {"cause", d.reason}};
  timeline_.append(std::move(e));
  if (!d.worker || kind == "leave") return;
  if (kind == "preempted") metrics_.get_counter("troupe_preemptions_total", preemptions_help, labels_).inc();
  metrics_.get_counter("troupe_worker_failures_total", failures_help, labels_).inc();
  if (!recovering_since_) {
    recovering_since_ = d.seen;
    recovery_target_ = workers_alive_;
  }
}

void master_observer::progress(const node_id& from, std::uint64_t samples, std::uint64_t steps) {
  (void)samples;
  auto now = clock_.now();
  auto [it, first] = last_progress_.try_emplace(from.to_string(), now);
  if (first || steps == 0) return;
  double per_step = std::chrono::duration<double>(now - it->second).count() / static_cast<double>(steps);
  it->second = now;
  auto& h = metrics_.get_histogram("troupe_step_seconds", step_help, step_buckets(), labels_);
  for (std::uint64_t i = 0; i < std::min<std::uint64_t>(steps, 1000); ++i) h.observe(per_step);
}

namespace {
// The report's noise scale once the estimator has one, else NaN (a gap, not 0: a batch = "global"
// job's first choice said "noise_scale": 0.0 before any estimate, which reads as no noise at all).
double estimated_noise_scale(const wire::goodput_report& g) {
  return g.rounds > 0 ? g.noise_scale : std::numeric_limits<double>::quiet_NaN();
}

observe::metrics_sample::goodput_sample sample_of(const wire::goodput_report& g) {
  return {estimated_noise_scale(g), static_cast<double>(g.batch), g.goodput, g.lr_factor, g.progress,
          g.push_shards == 0};
}
}  // namespace

void master_observer::goodput(const wire::goodput_report& g) {
  auto gauge = [&](const char* name, const char* help, double v) {
    metrics_.get_gauge(name, help, labels_).set(v);
  };
  gauge("troupe_gradient_noise_scale", "Gradient noise scale tr(Sigma)/|G|^2, samples",
        estimated_noise_scale(g));
  gauge("troupe_gradient_sqr_norm", "Moving average of |G|^2 (Adam: preconditioned)", g.grad_sqr);
  gauge("troupe_gradient_variance", "Moving average of tr(Sigma) over the base batch", g.grad_var);
  // async_ps: the estimate is its shards' (from the pushes); its workers step at their own batch, with
  // no global batch, scaled rate or goodput model: those gauges are a ring's (they read 0 and 64).
  if (g.push_shards > 0) return;
  gauge("troupe_lr_factor", "Learning rate multiple of the last step (lr_scaling)", g.lr_factor);
  gauge("troupe_lr_gain", "AdaScale gain at the current scale", g.gain);
  gauge("troupe_scale_invariant_steps", "Steps counted at the base batch (sum of the gain)", g.progress);
  gauge("troupe_global_batch", "Global batch per optimizer step", static_cast<double>(g.batch));
  gauge("troupe_goodput", "Measured throughput x statistical efficiency, base-batch samples/s", g.goodput);
  gauge("troupe_goodput_predicted", "The throughput model's goodput of the current batch",
        g.predicted_goodput);
  if (g.choice > 0) write_choice(g);
}

void master_observer::write_choice(const wire::goodput_report& g) {
  // The latest choice, numbered as the timeline numbers it (batch_choices.hpp: a restarted master or
  // a resumed job may be told of a choice the timeline already has).
  auto& e = choices_.place(g.choice, g.choice_progress);
  // The choice as made: its ring may have changed since (a report from before the fields: the
  // batch in force).
  const std::uint32_t replicas = g.choice_replicas > 0 ? g.choice_replicas : g.replicas;
  const std::uint32_t batch = g.choice_replicas > 0 ? g.choice_batch : g.batch;
  if (!e.chosen) {
    observe::batch_choice c;
    c.choice = e.number;
    c.batch = batch;
    c.from = g.choice_from;
    c.local_batch = g.local_batch;
    c.accum_steps = g.accum_steps;
    c.replicas = replicas;
    c.predicted_goodput = g.choice_predicted;
    c.previous_goodput = g.choice_before;
    c.noise_scale = estimated_noise_scale(g);
    c.at_progress = g.choice_progress;
    timeline_.batch_chosen(c);
    e.chosen = true;
  }
  if (!e.measured && g.choice_measured > 0) {
    timeline_.batch_measured(e.number, batch, g.choice_measured, g.choice_predicted);
    e.measured = true;
  }
}

bool master_observer::metrics_due(const cluster::membership_view& view) const {
  const auto now = clock_.now();
  if (!last_event_ || (job_finished_ && !final_written_)) return true;
  const auto since = now - *last_event_;
  const bool changed =
      view.count(cluster::node_role::worker, cluster::member_state::alive) != workers_written_;
  return since >= observe::metrics_pace.at(now - started_) || (changed && since >= std::chrono::seconds(1));
}

void master_observer::tick(const cluster::membership_view& view, const job_progress& progress,
                           const std::optional<wire::task_counts>& counts,
                           const wire::goodput_report& goodput, bool event) {
  auto now = clock_.now();
  while (!pending_.empty() && now - pending_.front().seen > cause_wait) {
    write_departure(pending_.front(), kind_of(pending_.front()));
    pending_.erase(pending_.begin());
  }
  workers_alive_ = view.count(cluster::node_role::worker, cluster::member_state::alive);
  // /metrics' gauges each second; the event at the timeline's pace, or at once when the workers changed.
  if (!event && last_gauges_ && now - *last_gauges_ < std::chrono::seconds(1)) return;
  last_gauges_ = now;
  // Every node's highest incarnation, as the view records them, and the master's own.
  const std::uint64_t restarts = view.restarts("master") + own_restarts_;
  update_metrics(view, progress, counts, restarts);
  if (!event || waits_for_counts(counts)) return;
  last_event_ = now;
  workers_written_ = workers_alive_;
  final_written_ = job_finished_;
  observe::metrics_sample m;
  // As result.json counts them: the workers' reports may lag the records the journal has done.
  m.samples = std::max(progress.samples_total(), counts ? counts->records_done : 0);
  if (progress.samples_total() > 0 && std::isfinite(progress.loss())) m.loss = progress.loss();
  m.samples_per_s = progress.samples_per_sec();
  m.workers_alive = workers_alive_;
  m.epoch = view.epoch();
  m.restarts = restarts;
  if (goodput.valid) m.goodput = sample_of(goodput);
  if (counts) {
    m.tasks_todo = counts->todo;
    m.tasks_doing = counts->doing;
    m.tasks_done = counts->done;
    m.tasks_failed = counts->failed;
    m.tasks_requeued = counts->requeued;
  }
  timeline_.metrics(m);
}

void master_observer::update_metrics(const cluster::membership_view& view, const job_progress& progress,
                                     const std::optional<wire::task_counts>& counts, std::uint64_t restarts) {
  auto grow = [&](const char* name, const char* help, observe::labels l, std::uint64_t now,
                  std::uint64_t& last) {
    auto& c = metrics_.get_counter(name, help, l);  // registered at 0 too: the series exists from the start
    if (now > last) c.inc(static_cast<double>(now - last));
    last = std::max(last, now);
  };
  auto with = [&](const char* k, const char* v) {
    auto l = labels_;
    l.emplace_back(k, v);
    return l;
  };
  grow("troupe_samples_total", "Samples trained", labels_, progress.samples_total(), last_samples_);
  grow("troupe_restarts_total", "Node replacements (incarnations above 0)", labels_, restarts,
       last_restarts_);
  if (counts) {
    grow("troupe_tasks_total", "Tasks by what happened to them", with("event", "done"), counts->done,
         last_done_);
    grow("troupe_tasks_total", "Tasks by what happened to them", with("event", "requeued"), counts->requeued,
         last_requeued_);
    grow("troupe_tasks_total", "Tasks by what happened to them", with("event", "quarantined"), counts->failed,
         last_failed_);
    const char* states[] = {"todo", "doing", "done", "failed"};
    const std::uint64_t values[] = {counts->todo, counts->doing, counts->done, counts->failed};
    for (int i = 0; i < 4; ++i)
      metrics_.get_gauge("troupe_tasks", "Tasks in each state now", with("state", states[i]))
          .set(static_cast<double>(values[i]));
  }
  metrics_.get_gauge("troupe_workers_alive", "Workers in the membership", labels_)
      .set(static_cast<double>(workers_alive_));
  metrics_.get_gauge("troupe_membership_epoch", "Membership epoch", labels_)
      .set(static_cast<double>(view.epoch()));
  metrics_.get_gauge("troupe_samples_per_second", "Samples/s over the last window", labels_)
      .set(progress.samples_per_sec());
  if (progress.samples_total() > 0 && std::isfinite(progress.loss()))
    metrics_.get_gauge("troupe_loss", "Mean minibatch loss, last window", labels_).set(progress.loss());
}

}  // namespace troupe::actors
