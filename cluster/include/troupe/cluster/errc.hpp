// Errors of the cluster module: launching and signalling node processes, resources, membership
// views and the job directory. Every error carries a context naming the node, file or key.
#pragma once

#include <system_error>

#include "troupe/core/error.hpp"

namespace troupe::cluster {

enum class cluster_errc {
  ok = 0,
  launch_failed = 1,           // a node process could not be started (fork, exec, log file)
  no_such_node = 2,            // a handle or name the launcher or view does not know
  insufficient_resources = 3,  // starting the node would exceed the machine's capacity
  already_exists = 4,          // a node name, member or job directory that is already taken
  invalid_spec = 5,            // a node spec, member or argument that makes no sense
  membership_limit = 6,        // a join or leave that would break min/max workers
  stale_incarnation = 7,       // a message or join from an older incarnation than the known one
  missing_file = 8,            // a job directory or one of its files is absent
  corrupt_file = 9,            // a job directory file that cannot be parsed
  io_error = 10,               // a read, write or rename in the job directory failed
  timed_out = 11,              // a wait ran past its deadline
};

const std::error_category& cluster_category() noexcept;
inline std::error_code make_error_code(cluster_errc e) noexcept {
  return {static_cast<int>(e), cluster_category()};
}

}  // namespace troupe::cluster

template <>
struct std::is_error_code_enum<troupe::cluster::cluster_errc> : std::true_type {};
