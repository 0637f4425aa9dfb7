// Loading and validating a whole job file: the sections each module owns are read here, so an
// unknown key anywhere is reported. Modules add their section readers as they land.
#pragma once

#include <string>
#include <vector>

#include "troupe/core/config.hpp"

namespace troupe::cli {

// Reads FILE and applies each "key=value" override in order.
expected<config_doc> load_job_doc(const std::string& file, const std::vector<std::string>& overrides);

// Reads every known section into its typed struct and checks what `troupe run` checks before it
// starts (actors/job_check.hpp); the first problem (or unknown key) is returned. A valid job gives
// what it probably does not mean as written (job::job_notes: `troupe config check` prints them).
// `effective`, when given, receives every key with its effective value, defaults included.
expected<std::vector<std::string>> validate_job_doc(const config_doc& doc, config_doc* effective = nullptr);

}  // namespace troupe::cli
