// `troupe serve`'s Prometheus metrics (docs/serving.md lists them), every series labelled with the
// model's name. Thread-safe as observe::registry is: the families are made once here, updates are
// lock-free; the per-status and per-version series are made on first use.
#pragma once

#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "troupe/observe/metrics.hpp"

namespace troupe::serve {

class serve_metrics {
 public:
  serve_metrics(observe::registry& reg, const std::string& model);

  observe::registry& registry() { return reg_; }
  observe::histogram& request_seconds;  // HTTP request in, answer out (infer routes)
  observe::histogram& batch_seconds;    // batch sent to a replica, result back
  observe::histogram& forward_seconds;  // forward on the replica
  observe::histogram& batch_rows;
  observe::gauge& queue_rows;
  observe::gauge& queue_requests;
  observe::gauge& inflight_batches;
  observe::gauge& replicas_ready;
  observe::counter& replica_restarts;
  observe::counter& retried_batches;
  observe::counter& swaps_done;
  observe::counter& swaps_refused;

  // troupe_serve_requests_total{code}
  void count_request(int status);
  // The versions whose series are kept: the latest ones to answer rows. An older version's two
  // series are removed when a newer one answers its first rows (a server under --watch swapping to a
  // new model every few minutes grew /metrics by two series a version, for good); a version that
  // answers again later starts its series anew (a counter reset, as Prometheus reads one).
  static constexpr std::size_t kept_versions = 4;
  // troupe_serve_rows_total{version}; troupe_serve_rows_per_second{version} is set by set_rate.
  void count_rows(const std::string& version, std::size_t rows);
  // Sets the rate of a kept version (nothing for one no longer kept).
  void set_rate(const std::string& version, double rows_per_second);
  // Rows answered so far, by kept version.
  std::unordered_map<std::string, double> rows_by_version();

 private:
  void set_rate_locked(const std::string& version, double rows_per_second);
  observe::registry& reg_;
  std::string model_;
  std::mutex mu_;
  std::unordered_map<int, observe::counter*> by_status_;
  std::unordered_map<std::string, observe::counter*> rows_;
  std::deque<std::string> versions_;  // the kept versions, oldest first
};

}  // namespace troupe::serve
