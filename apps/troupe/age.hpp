// An age given on the command line ("--older-than 7d"): `troupe jobs prune` and `troupe data cache
// prune` read it alike.
#pragma once

#include <optional>
#include <string>

namespace troupe::cli {

// "2w", "7d", "12h", "30m", "90s" in seconds; nullopt when it is none (a bare number is none: `7`
// meant as days would remove every job that ended 7 seconds ago).
std::optional<double> age_seconds(const std::string& text);

// Why --older-than's `text` is refused.
std::string age_refusal(const std::string& text);

}  // namespace troupe::cli
