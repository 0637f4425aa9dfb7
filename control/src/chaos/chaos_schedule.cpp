// Fault schedules: the text form of one fault, schedule files, and seeded random schedules.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>
#include <sstream>

#include "troupe/control/chaos.hpp"
#include "troupe/core/config.hpp"

namespace troupe::control {

const char* to_string(fault_kind k) {
  switch (k) {
    case fault_kind::kill:
      return "kill";
    case fault_kind::stop:
      return "stop";
    case fault_kind::drop:
      return "drop";
    case fault_kind::delay:
      return "delay";
    case fault_kind::preempt:
      return "preempt";
    case fault_kind::partition:
      return "partition";
    case fault_kind::throttle:
      return "throttle";
  }
  return "?";
}

namespace {

std::optional<double> number(const std::string& s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  // Finite and at most 1e9 (a fault time "inf" waited for the job's end; 1e20 us became 10 ms).
  if (ec != std::errc() || p != s.data() + s.size() || !(v >= 0) || !std::isfinite(v) || v > 1e9)
    return std::nullopt;
  return v;
}

// A tc rate: digits and a unit (kbit, mbit, gbit).
bool valid_rate(const std::string& r) {
  auto unit = r.find_first_not_of("0123456789");
  if (unit == 0 || unit == std::string::npos) return false;
  std::string u = r.substr(unit);
  return u == "kbit" || u == "mbit" || u == "gbit";
}

expected<void> parse_option(fault_spec& f, const std::string& opt) {
  auto eq = opt.find('=');
  if (opt.compare(0, 5, "rate=") == 0) {
    f.rate = opt.substr(5);
    if (valid_rate(f.rate)) return {};
    return make_unexpected(core_errc::invalid_argument,
                           "bad option '" + opt + "' (rate=100mbit, 1gbit, ...)");
  }
  auto v = eq == std::string::npos ? std::nullopt : number(opt.substr(eq + 1));
  if (!v)
    return make_unexpected(core_errc::invalid_argument,
                           "bad option '" + opt + "' (hold=S, p=P, us=N, rate=R)");
  std::string key = opt.substr(0, eq);
  if (key == "hold")
    f.hold_s = *v;
  else if (key == "p" && *v <= 1.0)
    f.drop_probability = *v;
  else if (key == "us")
    f.delay_us = static_cast<std::uint64_t>(*v);
  else
    return make_unexpected(core_errc::invalid_argument, "bad option '" + opt + "' (hold=S, p=0..1, us=N)");
  return {};
}

// A role (worker, ps, master; dispenser: the master's node), one node of it (worker-3, ps-0), or a
// host (host:NAME, host).

// Host targets take kill, partition, throttle and delay; node targets everything else.
expected<void> check_kind_target(const fault_spec& f) {
  bool host = fault_host(f).has_value();
  bool host_kind = f.kind == fault_kind::partition || f.kind == fault_kind::throttle;
  bool both = f.kind == fault_kind::kill || f.kind == fault_kind::delay;
  if (host && !host_kind && !both)
    return make_unexpected(core_errc::invalid_argument, std::string("'") + to_string(f.kind) +
                                                            "' is not a host fault (a host takes kill, "
                                                            "partition, throttle, delay)");
  if (!host && host_kind)
    return make_unexpected(
        core_errc::invalid_argument,
        std::string("'") + to_string(f.kind) + "' hits a host: the target must be host:NAME or host");
  if (f.kind == fault_kind::throttle && f.rate.empty())
    return make_unexpected(core_errc::invalid_argument, "throttle needs rate=R (e.g. rate=1gbit)");
  return {};
}

}  // namespace

expected<fault_kind> parse_fault_kind(const std::string& s) {
  for (auto k : {fault_kind::kill, fault_kind::stop, fault_kind::drop, fault_kind::delay, fault_kind::preempt,
                 fault_kind::partition, fault_kind::throttle})
    if (s == to_string(k)) return k;
  return make_unexpected(
      core_errc::invalid_argument,
      "unknown fault kind '" + s + "' (kill, stop, drop, delay, preempt, partition, throttle)");
}

expected<void> check_fault_target(const std::string& t) {
  if (t == "host" || (t.size() > 5 && t.compare(0, 5, "host:") == 0)) return {};
  for (const char* role : {"worker", "ps", "master", "dispenser"})
    if (t == role) return {};
  for (const std::string prefix : {"worker-", "ps-"})
    if (t.size() > prefix.size() && t.compare(0, prefix.size(), prefix) == 0 &&
        std::all_of(t.begin() + static_cast<std::ptrdiff_t>(prefix.size()), t.end(),
                    [](char c) { return c >= '0' && c <= '9'; }))
      return {};
  return make_unexpected(core_errc::invalid_argument,
                         std::string("unknown target '")
                             .append(t)
                             .append("' (worker, ps, master, dispenser, worker-N, ps-N, host:NAME, host)"));
}

std::optional<std::string> fault_host(const fault_spec& f) {
  if (f.target == "host") return std::string();
  if (f.target.compare(0, 5, "host:") == 0) return f.target.substr(5);
  return std::nullopt;
}

expected<fault_spec> parse_fault(const std::string& text) {
  std::istringstream in(text);
  std::string at, kind, target, opt;
  if (!(in >> at >> kind >> target))
    return make_unexpected(core_errc::parse_error,
                           "fault '" + text + "': expected 'T KIND TARGET [options]'");
  fault_spec f;
  auto t = number(at);
  if (!t) return make_unexpected(core_errc::parse_error, "fault '" + text + "': bad time '" + at + "'");
  f.at_s = *t;
  auto k = parse_fault_kind(kind);
  if (!k) return std::move(k).err().wrap("fault '" + text + "'");
  f.kind = *k;
  if (auto c = check_fault_target(target); !c) return std::move(c).err().wrap("fault '" + text + "'");
  f.target = target;
  while (in >> opt)
    if (auto r = parse_option(f, opt); !r) return std::move(r).err().wrap("fault '" + text + "'");
  if (auto c = check_kind_target(f); !c) return std::move(c).err().wrap("fault '" + text + "'");
  if (f.kind == fault_kind::drop && f.drop_probability == 0) f.drop_probability = 0.5;
  if (f.kind == fault_kind::delay && f.delay_us == 0) f.delay_us = 10000;
  return f;
}

expected<std::vector<fault_spec>> read_schedule(const std::string& path) {
  auto doc = config_doc::from_file(path);
  if (!doc) return doc.err();
  config_reader reader(*doc);
  auto texts = reader.section("chaos").get_strings("faults", {});
  if (auto r = reader.finish(); !r) return r.err();
  std::vector<fault_spec> out;
  for (const auto& t : texts) {
    auto f = parse_fault(t);
    if (!f) return std::move(f).err().wrap(path);
    out.push_back(*f);
  }
  return out;
}

std::vector<fault_spec> random_schedule(const random_faults& r) {
  std::vector<fault_spec> out;
  if (r.rate <= 0 || r.kinds.empty() || r.targets.empty()) return out;
  std::mt19937_64 rng(r.seed);
  std::exponential_distribution<double> gap(r.rate);
  std::uniform_int_distribution<std::size_t> kind(0, r.kinds.size() - 1), target(0, r.targets.size() - 1);
  for (double t = r.start_s + gap(rng); t < r.duration_s; t += gap(rng)) {
    fault_spec f;
    f.at_s = t;
    f.kind = r.kinds[kind(rng)];
    f.target = r.targets[target(rng)];
    f.hold_s = r.hold_s;
    if (f.kind == fault_kind::drop) f.drop_probability = 0.3;
    if (f.kind == fault_kind::delay) f.delay_us = 10000;
    if (f.kind == fault_kind::throttle) f.rate = "100mbit";
    if (!check_kind_target(f)) continue;  // e.g. stop drawn for a host: not a fault
    out.push_back(f);
  }
  return out;
}

}  // namespace troupe::control
