// Other hosts for the local launcher ([cluster] hosts, host_command): a node placed on a host runs
// as `host_command` (with {host} replaced) followed by the node's own command line, as MPI's
// hostfiles and Horovod's -H do with ssh. Placement fills the hosts in their order, as MPI's default
// (by slot) does: neighbours in a ring share a host, and its links are shared memory.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/cluster/local/launcher.hpp"

namespace troupe::cluster::local {

// The words of a command line ("ssh {host}"), split on white space (no quoting).
std::vector<std::string> split_words(const std::string& s);

// "h1" (one slot) or "h1:4". Errors: invalid_spec naming the entry.
expected<host_slots> parse_host_slots(std::string_view entry);

// Whether `host` is one of `hosts` or "localhost" (this machine). Errors: invalid_spec "host 'x'
// is not in cluster.hosts (h1, h2)".
expected<void> known_host(const remote_hosts& hosts, const std::string& host);

// The host a node goes to: `wanted` when it names one ("localhost": this machine, no command) with
// a free slot, else the first listed host with a free slot not in `avoid`, else the first with a free
// slot (a warning when `wanted` was full). `used`: nodes running per host. Errors: invalid_spec for a
// host not in the list, insufficient_resources when every slot is taken (naming each host's use).
expected<std::string> pick_host(const remote_hosts& hosts, const std::map<std::string, int>& used,
                                const std::string& wanted, const std::string& node,
                                const std::vector<std::string>& avoid = {});

// `spec` run through the host command on `host`: program = the command's first word, argv = the
// command with {host} replaced, then `env [-i] K=V...` when the node has its own environment, then
// the node's program (resolved here: `self` when empty) and its arguments.
node_spec on_host(const node_spec& spec, const std::string& host, const std::vector<std::string>& command,
                  const std::string& self);

}  // namespace troupe::cluster::local
