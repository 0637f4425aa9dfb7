// The dashboard's cluster page for jobs run on Slurm: what each troupe job held of the cluster
// over time. Pure functions from the Slurm commands' text to series, unit-tested without a
// cluster; the dashboard (dashboard_cluster.cpp) runs the commands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace troupe::observe {

// One Slurm job (one troupe node) that was given CPUs.
struct slurm_allocation {
  std::string slurm_id, name, partition, state;
  int cpus = 0;
  std::int64_t start_ms = 0;
  std::int64_t end_ms = -1;  // -1: still running
};

// The sacct arguments parse_sacct reads (after `sacct -P -n -X -j <ids>`); run it with
// SLURM_TIME_FORMAT=%s so times are Unix seconds (ISO local times are read too).
inline constexpr const char* sacct_format = "--format=JobIDRaw,JobName,Partition,AllocCPUS,Start,End,State";

// `sacct -P -n -X --format=<sacct_format>` text -> the jobs that started (a pending job, Start
// `Unknown`/`None`, holds nothing and is left out). Lines that do not parse are skipped.
std::vector<slurm_allocation> parse_sacct(const std::string& text);

// `sinfo -h -N -o '%N|%c'` text -> the cluster's CPUs, each node counted once (sinfo lists a
// node once per partition).
int parse_sinfo_cpus(const std::string& text);

// The troupe node of a Slurm job named `<prefix>:<node>` (the launcher's names); empty for any
// other name (slurmdbd lists a job it has not fully recorded yet as `allocation`, no partition).
std::string node_of_job_name(const std::string& name);

// Allocated CPUs per group (a troupe job) as step series over every start and end, and the
// utilisation (allocated / total) with its time-weighted average over [first start, last end].
struct usage_series {
  std::vector<std::int64_t> t_ms;
  std::vector<std::string> groups;
  std::vector<std::vector<int>> cpus;  // [group][time]: CPUs held from t_ms[i] until t_ms[i+1]
  std::vector<double> utilisation;     // [time]
  double average = 0;
};
struct grouped_allocation {
  std::string group;
  slurm_allocation a;
};
// `now_ms` ends the allocations still running. total_cpus <= 0 gives utilisation 0.
usage_series stack_usage(const std::vector<grouped_allocation>& allocations, int total_cpus,
                         std::int64_t now_ms);

}  // namespace troupe::observe
