// What a node's process wrote to its log file since its launch, for its exit report
// (exit_trace): both backends note the log's size when they launch a node and read what was added
// when it has ended.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "troupe/cluster/launcher.hpp"

namespace troupe::cluster {

// The size of the file at `path`; nullopt when it does not exist (or `path` is empty).
std::optional<std::uint64_t> file_size(const std::string& path);

// Fills t.log_missing, t.log_bytes and t.output from the log at `path`, which held `start` bytes
// at the launch. Lines that begin with `skip` (the launcher's own) are left out of t.output. Reads
// at most exit_trace::output_limit bytes; never throws. An empty `path` leaves `t` as it is.
void read_node_output(const std::string& path, std::uint64_t start, exit_trace& t,
                      const std::string& skip = {});

}  // namespace troupe::cluster
