#include "troupe/observe/cluster_usage.hpp"

#include <algorithm>
#include <cstdlib>
#include <ctime>
#include <iomanip>
#include <set>
#include <sstream>

namespace troupe::observe {

namespace {

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string::size_type from = 0;
  for (;;) {
    auto at = line.find(sep, from);
    out.push_back(line.substr(from, at == std::string::npos ? std::string::npos : at - from));
    if (at == std::string::npos) return out;
    from = at + 1;
  }
}

bool to_long(const std::string& s, long long& v) {
  if (s.empty()) return false;
  char* end = nullptr;
  v = std::strtoll(s.c_str(), &end, 10);
  return *end == '\0';
}

// Unix seconds (SLURM_TIME_FORMAT=%s) or sacct's default local `YYYY-MM-DDTHH:MM:SS`; -1 when
// neither (`Unknown`, `None`).
std::int64_t parse_time_ms(const std::string& s) {
  long long secs = 0;
  if (to_long(s, secs)) return secs > 0 ? secs * 1000 : -1;
  std::tm tm{};
  std::istringstream in(s);
  in >> std::get_time(&tm, "%Y-%m-%dT%H:%M:%S");
  if (in.fail()) return -1;
  tm.tm_isdst = -1;
  std::time_t t = std::mktime(&tm);
  return t < 0 ? -1 : static_cast<std::int64_t>(t) * 1000;
}

}  // namespace

std::vector<slurm_allocation> parse_sacct(const std::string& text) {
  std::vector<slurm_allocation> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto f = split(line, '|');
    long long cpus = 0;
    if (f.size() < 7 || !to_long(f[3], cpus) || cpus < 0) continue;
    slurm_allocation a;
    a.slurm_id = f[0];
    a.name = f[1];
    a.partition = f[2];
    a.cpus = static_cast<int>(cpus);
    a.start_ms = parse_time_ms(f[4]);
    a.end_ms = parse_time_ms(f[5]);
    a.state = f[6];
    if (a.start_ms < 0 || a.cpus == 0) continue;
    if (a.end_ms >= 0 && a.end_ms < a.start_ms) a.end_ms = a.start_ms;
    out.push_back(std::move(a));
  }
  return out;
}

int parse_sinfo_cpus(const std::string& text) {
  std::set<std::string> seen;
  int total = 0;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto f = split(line, '|');
    long long cpus = 0;
    if (f.size() != 2 || f[0].empty() || !to_long(f[1], cpus) || cpus <= 0) continue;
    if (seen.insert(f[0]).second) total += static_cast<int>(cpus);
  }
  return total;
}

std::string node_of_job_name(const std::string& name) {
  auto colon = name.rfind(':');
  return colon == std::string::npos ? std::string() : name.substr(colon + 1);
}

usage_series stack_usage(const std::vector<grouped_allocation>& allocations, int total_cpus,
                         std::int64_t now_ms) {
  usage_series s;
  std::set<std::int64_t> times;
  for (const auto& g : allocations) {
    times.insert(g.a.start_ms);
    times.insert(g.a.end_ms < 0 ? std::max(now_ms, g.a.start_ms) : g.a.end_ms);
    if (std::find(s.groups.begin(), s.groups.end(), g.group) == s.groups.end()) s.groups.push_back(g.group);
  }
  s.t_ms.assign(times.begin(), times.end());
  s.cpus.assign(s.groups.size(), std::vector<int>(s.t_ms.size(), 0));
  for (const auto& g : allocations) {
    auto gi =
        static_cast<std::size_t>(std::find(s.groups.begin(), s.groups.end(), g.group) - s.groups.begin());
    std::int64_t end = g.a.end_ms < 0 ? std::max(now_ms, g.a.start_ms) : g.a.end_ms;
    for (std::size_t i = 0; i < s.t_ms.size(); ++i)
      if (s.t_ms[i] >= g.a.start_ms && s.t_ms[i] < end) s.cpus[gi][i] += g.a.cpus;
  }
  double area = 0;
  s.utilisation.assign(s.t_ms.size(), 0.0);
  for (std::size_t i = 0; i < s.t_ms.size(); ++i) {
    int held = 0;
    for (const auto& c : s.cpus) held += c[i];
    if (total_cpus > 0) s.utilisation[i] = static_cast<double>(held) / total_cpus;
    if (i + 1 < s.t_ms.size()) area += s.utilisation[i] * static_cast<double>(s.t_ms[i + 1] - s.t_ms[i]);
  }
  if (s.t_ms.size() > 1) s.average = area / static_cast<double>(s.t_ms.back() - s.t_ms.front());
  return s;
}

}  // namespace troupe::observe
