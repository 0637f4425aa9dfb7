// Addresses for nodes spread over several hosts (a batch cluster): where a node on some host
// listens so that the others reach it, and which of this machine's addresses a given peer reaches.
#pragma once

#include <string>

#include "troupe/core/error.hpp"

namespace troupe::cluster {

// `listen` as a node's --listen gives it ("host:port"); the host "@host" stands for this host's
// own address (its hostname resolved, IPv4, not loopback where there is another), so that a node
// Slurm starts on any host listens where the others reach it. Other values are returned as given.
// Errors: invalid_spec when the hostname does not resolve.
expected<std::string> resolve_listen(const std::string& listen);

// The IPv4 address `name` resolves to (an address is returned as it is). Errors: invalid_spec.
expected<std::string> ipv4_of(const std::string& name);

// The local address this machine uses to reach `ip` (the source address of a route to it): where
// a control process listens for nodes on other hosts. Errors: io_error naming `ip`.
expected<std::string> local_address_towards(const std::string& ip);

// `advertise` ([cluster] advertise: where the master and the runner listen for nodes on other hosts)
// checked before a job starts: an IPv4 address (or a name resolving to one) of this machine, not
// loopback (the hosts cannot reach it: every node then ended after its connect timeout, relaunched
// for ever). An address of another machine failed the job at its start (exit 1, a job directory
// left). Errors: invalid_spec naming cluster.advertise.
expected<void> check_advertise(const std::string& advertise);

}  // namespace troupe::cluster
