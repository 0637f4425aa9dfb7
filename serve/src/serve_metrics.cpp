#include "serve_metrics.hpp"

namespace troupe::serve {

namespace {

// 50 us to ~52 s: past the default request_timeout_ms (30 s). The top bucket was 3.28 s until
// 2026-12-01: a request waiting 4 s or 29 s behind a hung replica fell alike in +Inf.
std::vector<double> latency_buckets() {
  return observe::exponential_buckets(50e-6, 2, 21);
}

}  // namespace

serve_metrics::serve_metrics(observe::registry& reg, const std::string& model)
    : request_seconds(reg.get_histogram("troupe_serve_request_seconds",
                                        "Inference requests: from the request read to the answer written",
                                        latency_buckets(), {{"model", model}})),
      batch_seconds(reg.get_histogram("troupe_serve_batch_seconds",
                                      "Batches: from their send to a replica to its result",
                                      latency_buckets(), {{"model", model}})),
      forward_seconds(reg.get_histogram("troupe_serve_forward_seconds",
                                        "Batches: time in forward on the replica", latency_buckets(),
                                        {{"model", model}})),
      batch_rows(reg.get_histogram("troupe_serve_batch_rows", "Rows per batch sent to a replica",
                                   observe::exponential_buckets(1, 2, 13), {{"model", model}})),
      queue_rows(reg.get_gauge("troupe_serve_queue_rows", "Rows waiting for a replica", {{"model", model}})),
      queue_requests(
          reg.get_gauge("troupe_serve_queue_requests", "Requests waiting for a replica", {{"model", model}})),
      inflight_batches(reg.get_gauge("troupe_serve_inflight_batches", "Batches sent and not yet answered",
                                     {{"model", model}})),
      replicas_ready(reg.get_gauge("troupe_serve_replicas_ready",
                                   "Replicas serving the model's current version", {{"model", model}})),
      replica_restarts(reg.get_counter("troupe_serve_replica_restarts_total",
                                       "Replicas relaunched after they died", {{"model", model}})),
      retried_batches(reg.get_counter("troupe_serve_retried_batches_total",
                                      "Batches sent again because their replica died or hung",
                                      {{"model", model}})),
      swaps_done(reg.get_counter("troupe_serve_swaps_total", "Model swaps (hot reloads)",
                                 {{"model", model}, {"result", "done"}})),
      swaps_refused(reg.get_counter("troupe_serve_swaps_total", "Model swaps (hot reloads)",
                                    {{"model", model}, {"result", "refused"}})),
      reg_(reg),
      model_(model) {}

void serve_metrics::count_request(int status) {
  observe::counter* c;
  {
    std::lock_guard lk(mu_);
    auto& slot = by_status_[status];
    if (!slot)
      slot = &reg_.get_counter("troupe_serve_requests_total", "Inference requests answered, by HTTP status",
                               {{"model", model_}, {"code", std::to_string(status)}});
    c = slot;
  }
  c->inc();
}

void serve_metrics::count_rows(const std::string& version, std::size_t rows) {
  std::lock_guard lk(mu_);
  auto& slot = rows_[version];
  if (!slot) {
    slot = &reg_.get_counter("troupe_serve_rows_total", "Rows answered, by model version",
                             {{"model", model_}, {"version", version}});
    set_rate_locked(version, 0);  // the series exists from the version's first rows
    versions_.push_back(version);
    if (versions_.size() > kept_versions) {
      const observe::labels old{{"model", model_}, {"version", versions_.front()}};
      reg_.remove("troupe_serve_rows_total", old);
      reg_.remove("troupe_serve_rows_per_second", old);
      rows_.erase(versions_.front());
      versions_.pop_front();
    }
  }
  rows_.at(version)->inc(static_cast<double>(rows));
}

std::unordered_map<std::string, double> serve_metrics::rows_by_version() {
  std::lock_guard lk(mu_);
  std::unordered_map<std::string, double> out;
  for (const auto& [v, c] : rows_) out[v] = c->value();
  return out;
}

void serve_metrics::set_rate(const std::string& version, double rows_per_second) {
  std::lock_guard lk(mu_);
  if (rows_.count(version) != 0) set_rate_locked(version, rows_per_second);
}

void serve_metrics::set_rate_locked(const std::string& version, double rows_per_second) {
  reg_.get_gauge("troupe_serve_rows_per_second",
                 "Rows answered per second over the last second, by model version",
                 {{"model", model_}, {"version", version}})
      .set(rows_per_second);
}

}  // namespace troupe::serve
