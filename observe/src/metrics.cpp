#include "troupe/observe/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <variant>

#include "troupe/core/shortest.hpp"

namespace troupe::observe {

namespace {

void add_atomic(std::atomic<double>& a, double v) noexcept {
  double cur = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(cur, cur + v, std::memory_order_relaxed)) {
  }
}

bool valid_name(const std::string& n, bool colon_ok) {
  if (n.empty()) return false;
  for (std::size_t i = 0; i < n.size(); ++i) {
    char c = n[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon_ok && c == ':') ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return shortest_text(v);  // le="0.1", not le="0.10000000000000001"
}

std::string label_text(const labels& l, const std::string& extra_name = {},
                       const std::string& extra_value = {}) {
  if (l.empty() && extra_name.empty()) return {};
  std::string s = "{";
  for (const auto& [k, v] : l) {
    if (s.size() > 1) s += ',';
    s.append(k).append("=\"").append(escape_label_value(v)).append("\"");
  }
  if (!extra_name.empty()) {
    if (s.size() > 1) s += ',';
    s.append(extra_name).append("=\"").append(extra_value).append("\"");
  }
  return s + "}";
}

}  // namespace

void counter::inc(double v) noexcept {
  if (v > 0) add_atomic(v_, v);
}

void gauge::add(double v) noexcept {
  add_atomic(v_, v);
}

histogram::histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), buckets_(new std::atomic<std::uint64_t>[bounds_.size() + 1]) {
  for (std::size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void histogram::observe(double v) noexcept {
  std::size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  add_atomic(sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::uint64_t> histogram::counts() const {
  std::vector<std::uint64_t> c(bounds_.size() + 1);
  for (std::size_t i = 0; i < c.size(); ++i) c[i] = buckets_[i].load(std::memory_order_relaxed);
  return c;
}

struct registry::family {
  std::string name, help, type;
  using metric = std::variant<std::unique_ptr<class counter>, std::unique_ptr<class gauge>,
                              std::unique_ptr<class histogram>>;
  std::map<labels, metric> series;
};

registry::registry() = default;
registry::~registry() = default;

registry::family& registry::get(const std::string& name, const std::string& help, const char* type) {
  if (!valid_name(name, true)) throw std::invalid_argument("bad metric name '" + name + "'");
  auto& f = families_[name];
  if (!f) f.reset(new family{name, help, type, {}});
  if (f->type != type)
    throw std::invalid_argument("metric '" + name + "' is a " + f->type + ", not a " + type);
  return *f;
}

namespace {
void check_labels(const labels& l) {
  for (const auto& [k, v] : l)
    if (!valid_name(k, false) || k.rfind("__", 0) == 0)
      throw std::invalid_argument("bad label name '" + k + "'");
}
}  // namespace

counter& registry::get_counter(const std::string& name, const std::string& help, const labels& l) {
  check_labels(l);
  std::lock_guard lock(mu_);
  auto& m = get(name, help, "counter").series[l];
  if (m.index() != 0 || !std::get<0>(m)) m = std::make_unique<class counter>();
  return *std::get<0>(m);
}

gauge& registry::get_gauge(const std::string& name, const std::string& help, const labels& l) {
  check_labels(l);
  std::lock_guard lock(mu_);
  auto& m = get(name, help, "gauge").series[l];
  if (m.index() != 1) m = std::make_unique<class gauge>();
  return *std::get<1>(m);
}

histogram& registry::get_histogram(const std::string& name, const std::string& help,
                                   const std::vector<double>& bounds, const labels& l) {
  check_labels(l);
  std::lock_guard lock(mu_);
  auto& m = get(name, help, "histogram").series[l];
  if (m.index() != 2) m = std::make_unique<class histogram>(bounds);
  return *std::get<2>(m);
}

void registry::remove(const std::string& name, const labels& l) {
  std::lock_guard lock(mu_);
  if (auto f = families_.find(name); f != families_.end()) f->second->series.erase(l);
}

namespace {

void append_help(std::string& out, const std::string& name, const std::string& help) {
  out.append("# HELP ").append(name).append(" ");
  for (char c : help)
    out += c == '\n' ? std::string("\\n") : c == '\\' ? std::string("\\\\") : std::string(1, c);
}

// A histogram's series: cumulative buckets (the last "+Inf"), _sum and _count.
void append_histogram(std::string& out, const std::string& name, const labels& l, const histogram& h) {
  auto counts = h.counts();
  std::uint64_t cum = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    cum += counts[i];
    std::string le = i < h.bounds().size() ? number(h.bounds()[i]) : "+Inf";
    out.append(name)
        .append("_bucket")
        .append(label_text(l, "le", le))
        .append(" ")
        .append(std::to_string(cum))
        .append("\n");
  }
  out.append(name).append("_sum").append(label_text(l)).append(" ").append(number(h.sum())).append("\n");
  out.append(name)
      .append("_count")
      .append(label_text(l))
      .append(" ")
      .append(std::to_string(cum))
      .append("\n");
}

}  // namespace

std::string registry::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    append_help(out, name, f->help);
    out.append("\n# TYPE ").append(name).append(" ").append(f->type).append("\n");
    for (const auto& [l, m] : f->series) {
      if (auto* c = std::get_if<0>(&m)) {
        out.append(name).append(label_text(l)).append(" ").append(number((*c)->value())).append("\n");
      } else if (auto* g = std::get_if<1>(&m)) {
        out.append(name).append(label_text(l)).append(" ").append(number((*g)->value())).append("\n");
      } else {
        append_histogram(out, name, l, *std::get<2>(m));
      }
    }
  }
  return out;
}

std::vector<double> exponential_buckets(double start, double factor, int count) {
  std::vector<double> b;
  for (int i = 0; i < count; ++i, start *= factor) b.push_back(start);
  return b;
}

std::string escape_label_value(const std::string& v) {
  std::string s;
  for (char c : v) {
    if (c == '\\')
      s += "\\\\";
    else if (c == '"')
      s += "\\\"";
    else if (c == '\n')
      s += "\\n";
    else
      s += c;
  }
  return s;
}

}  // namespace troupe::observe
