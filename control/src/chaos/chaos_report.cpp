// The chaos report: JSON for machines, a table for people.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "troupe/control/chaos.hpp"

namespace troupe::control {

namespace {

nlohmann::json opt_seconds(double s) {
  return s < 0 ? nlohmann::json(nullptr) : nlohmann::json(s);
}

std::string cell(double s) {
  if (s < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", s);
  return buf;
}

}  // namespace

std::string chaos_report::to_json() const {
  nlohmann::json j;
  j["job_dir"] = job_dir;
  auto arr = nlohmann::json::array();
  for (const auto& f : faults)
    arr.push_back({{"t_s", f.t_s},
                   {"at_s", f.spec.at_s},
                   {"kind", to_string(f.spec.kind)},
                   {"target", f.spec.target},
                   {"node", f.node},
                   {"host", f.host},
                   {"nodes", f.nodes},
                   {"pid", f.pid},
                   {"slurm_job", f.slurm_job},
                   {"hold_s", f.spec.hold_s},
                   {"detected_s", opt_seconds(f.detected_s)},
                   {"recovered_s", opt_seconds(f.recovered_s)},
                   {"requeued", f.requeued},
                   {"restarts", f.restarts},
                   {"resumed_s", opt_seconds(f.resumed_s)},
                   {"note", f.note}});
  j["faults"] = arr;
  j["job_exit_code"] = job_exit_code ? nlohmann::json(*job_exit_code) : nlohmann::json(nullptr);
  auto res = nlohmann::json::parse(job_result, nullptr, false);
  j["job_result"] = res.is_discarded() ? nlohmann::json(nullptr) : res;
  return j.dump(2);
}

std::string chaos_report::summary_table() const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-7s %-9s %-10s %-14s %9s %9s %8s %8s  %s\n", "T(s)", "FAULT", "TARGET",
                "NODE", "DETECT(s)", "RECOV(s)", "REQUEUED", "RESTARTS", "NOTE");
  out += line;
  for (const auto& f : faults) {
    std::string note = f.note;
    if (!f.host.empty()) {  // the nodes a host fault hit, then its note
      std::string hit;
      for (const auto& n : f.nodes) hit.append(hit.empty() ? "" : " ").append(n);
      note = "[" + hit + "]" + (note.empty() ? "" : " ") + note;
    }
    // A fault that never fired (the job was over) shows when it was due.
    std::snprintf(line, sizeof line, "%-7.2f %-9s %-10s %-14s %9s %9s %8llu %8llu  %s\n",
                  f.t_s > 0 ? f.t_s : f.spec.at_s, to_string(f.spec.kind), f.spec.target.c_str(),
                  f.node.empty() ? "-" : f.node.c_str(), cell(f.detected_s).c_str(),
                  cell(f.recovered_s).c_str(), static_cast<unsigned long long>(f.requeued),
                  static_cast<unsigned long long>(f.restarts), note.c_str());
    out += line;
  }
  if (job_exit_code) out += "job exit code: " + std::to_string(*job_exit_code) + "\n";
  return out;
}

}  // namespace troupe::control
