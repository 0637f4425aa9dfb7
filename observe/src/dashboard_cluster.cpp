#include "dashboard_cluster.hpp"

#include <cctype>
#include <map>
#include <sstream>

#include "troupe/observe/cluster_usage.hpp"

namespace troupe::observe {

using nlohmann::json;

namespace {

constexpr std::size_t max_ids = 4096;  // per request: sacct's command line stays small

bool numeric(const std::string& s) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// Slurm job id -> troupe job id, from every <job dir>/slurm_jobs under the root (read as the
// dashboard reads any file of a job: job_files.hpp; one that cannot be read adds nothing).
std::map<std::string, std::string> recorded_ids(const jobs_root& root) {
  std::map<std::string, std::string> ids;
  auto jobs = root.job_ids();
  if (!jobs) return ids;
  for (const auto& id : *jobs) {
    auto dir = root.job(id);
    auto text = dir ? dir->read_all("slurm_jobs", 1 << 20) : expected<std::string>(dir.err());
    if (!text) continue;
    std::istringstream in(*text);
    std::string line;
    while (ids.size() < max_ids && std::getline(in, line))
      if (numeric(line)) ids[line] = id;
  }
  return ids;
}

std::pair<int, json> unavailable(int status, const std::string& why) {
  return {status, {{"slurm", false}, {"why", why}}};
}

json allocation_json(const slurm_allocation& a) {
  return {{"slurm_id", a.slurm_id}, {"node", node_of_job_name(a.name)}, {"partition", a.partition},
          {"cpus", a.cpus},         {"start_ms", a.start_ms},           {"end_ms", a.end_ms},
          {"state", a.state}};
}

}  // namespace

std::pair<int, json> cluster_json(const jobs_root& root, const slurm_command& run, std::int64_t now_ms) {
  auto ids = recorded_ids(root);
  if (ids.empty())
    return unavailable(200, "no job under " + root.path() + " ran on Slurm (none has a slurm_jobs file)");
  if (!run) return unavailable(200, "this dashboard runs no Slurm commands");
  auto sinfo = run({"sinfo", "-h", "-N", "-o", "%N|%c"});
  if (!sinfo) return unavailable(502, "sinfo: " + sinfo.err().to_string());
  std::string list;
  for (const auto& [id, job] : ids) list.append(list.empty() ? "" : ",").append(id);
  auto sacct = run({"sacct", "-P", "-n", "-X", "-j", list, sacct_format});
  if (!sacct) return unavailable(502, "sacct: " + sacct.err().to_string());
  std::vector<grouped_allocation> all;
  json jobs = json::object();
  for (auto& a : parse_sacct(*sacct)) {
    auto it = ids.find(a.slurm_id);
    if (it == ids.end()) continue;
    jobs[it->second].push_back(allocation_json(a));
    grouped_allocation g;
    g.group = it->second;
    g.a = std::move(a);
    all.push_back(std::move(g));
  }
  int total = parse_sinfo_cpus(*sinfo);
  auto s = stack_usage(all, total, now_ms);
  json series = {{"t_ms", s.t_ms}, {"jobs", s.groups}, {"cpus", s.cpus}, {"utilisation", s.utilisation}};
  return {200,
          {{"slurm", true},
           {"total_cpus", total},
           {"now_ms", now_ms},
           {"jobs", jobs},
           {"series", series},
           {"utilisation_avg", s.average}}};
}

}  // namespace troupe::observe
