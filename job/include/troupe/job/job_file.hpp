// The job a job directory holds: its job.toml (as its runner resolved it) read into a job_spec,
// for the processes that run beside the runner (nodes, `troupe chaos`).
#pragma once

#include <string>

#include "troupe/job/job_spec.hpp"

namespace troupe::job {

// Errors: the job directory's (not a job directory, job.toml unreadable) or job_spec::read's.
expected<job_spec> load_job_spec(const std::string& job_dir);

}  // namespace troupe::job
