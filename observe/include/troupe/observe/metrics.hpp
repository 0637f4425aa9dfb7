// Prometheus metrics in the text exposition format (version 0.0.4): counters, gauges and
// histograms with labels, kept in a registry that renders them for a /metrics endpoint.
//
// Threads: get-or-create (get_counter(), get_gauge(), get_histogram()) takes the registry's lock; updating a
// metric (inc, set, observe) is lock-free and may happen on any thread; render() may run
// concurrently with updates. References returned stay valid for the registry's life.
// Names must match [a-zA-Z_:][a-zA-Z0-9_:]* and label names [a-zA-Z_][a-zA-Z0-9_]*; a bad name, or
// one name registered with two types, throws std::invalid_argument (a programming error).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace troupe::observe {

using labels = std::vector<std::pair<std::string, std::string>>;

class counter {
 public:
  void inc(double v = 1) noexcept;  // v >= 0
  double value() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

class gauge {
 public:
  void set(double v) noexcept { v_.store(v, std::memory_order_relaxed); }
  void add(double v) noexcept;
  double value() const noexcept { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0};
};

class histogram {
 public:
  explicit histogram(std::vector<double> upper_bounds);  // sorted ascending; +Inf is implied
  void observe(double v) noexcept;
  const std::vector<double>& bounds() const { return bounds_; }
  // Per-bucket counts (not cumulative; the last is +Inf), sum and count, read together loosely.
  std::vector<std::uint64_t> counts() const;
  double sum() const noexcept { return sum_.load(std::memory_order_relaxed); }
  std::uint64_t count() const noexcept { return count_.load(std::memory_order_relaxed); }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets_;
  std::atomic<double> sum_{0};
  std::atomic<std::uint64_t> count_{0};
};

class registry {
 public:
  registry();
  ~registry();
  registry(const registry&) = delete;
  registry& operator=(const registry&) = delete;
  class counter& get_counter(const std::string& name, const std::string& help, const labels& l = {});
  class gauge& get_gauge(const std::string& name, const std::string& help, const labels& l = {});
  class histogram& get_histogram(const std::string& name, const std::string& help,
                                 const std::vector<double>& bounds, const labels& l = {});
  // Removes the series `l` of `name` (a label value retired for good: a served model's old
  // version); references to it must no longer be used. Nothing when there is none.
  void remove(const std::string& name, const labels& l);
  // Every family with HELP and TYPE lines, series in label order.
  std::string render() const;

  struct family;

 private:
  family& get(const std::string& name, const std::string& help, const char* type);
  mutable std::mutex mu_;
  std::map<std::string, std::unique_ptr<family>> families_;
};

// Exponential buckets: start, start*factor, ... (count of them).
std::vector<double> exponential_buckets(double start, double factor, int count);
// Escapes a label value (\\, \", \n) for the text format.
std::string escape_label_value(const std::string& v);

}  // namespace troupe::observe
