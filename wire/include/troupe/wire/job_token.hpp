// The job's shared secret: every node and client of a job authenticates its transport handshake
// with the token the runner writes to `<job dir>/token` (docs/wire_format.md, "Handshake").
#pragma once

#include <string>

#include "troupe/core/error.hpp"

namespace troupe::wire {

// The token of the job in `job_dir`; an error naming the file when it is missing or unreadable.
expected<std::string> read_job_token(const std::string& job_dir);

}  // namespace troupe::wire
