// Faults on whole hosts of a job on the local launcher's host list ([cluster] hosts), for
// `troupe chaos` (docs/chaos.md "Host faults"). troupe does not reach into another host itself: it
// runs the job's `host_fault_command`, a template with {action}, {host}, {arg} and {job_dir}
// replaced, as a cluster's operator would with `ssh {host} ...`. The actions, and {arg}:
//
//   kill   SIGKILL every troupe process of the job on the host      {arg}: KILL
//   cut    take the host's link down (a partition)                    {arg}: ""
//   heal   bring it back up                                           {arg}: ""
//   limit  shape the host's link with tc tbf                          {arg}: a rate ("1gbit") or "off"
//
// For hosts made by scripts/hosts.sh (host_command "<...>/hosts.sh exec {host}") the default is
// "<...>/hosts.sh {action} {host} {arg}". A word that is empty once replaced is dropped.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "troupe/cluster/config.hpp"
#include "troupe/core/error.hpp"

namespace troupe::cluster {

// The command template host faults use: cfg.host_fault_command, else the default above. Errors
// (invalid_spec): no hosts listed, or neither a template nor a hosts.sh host_command, naming the key.
expected<std::string> host_fault_template(const cluster_config& cfg);

// `host` is one of cfg.hosts (by name). Errors (invalid_spec) name the host and the list.
expected<void> check_fault_host(const cluster_config& cfg, const std::string& host);

// The argv of one action: the template's words with the placeholders replaced.
std::vector<std::string> host_fault_argv(const std::string& tmpl, const std::string& action,
                                         const std::string& host, const std::string& arg,
                                         const std::string& job_dir);

// Runs the action (host_fault_template + host_fault_argv) and waits up to `timeout`. Errors
// (launch_failed) name the command and carry its stderr when it fails or exits non-zero.
expected<void> run_host_fault(const cluster_config& cfg, const std::string& action, const std::string& host,
                              const std::string& arg, const std::string& job_dir,
                              std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace troupe::cluster
