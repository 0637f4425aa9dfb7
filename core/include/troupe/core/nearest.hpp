// "Did you mean ...?": the nearest known name to a mistyped one, by edit distance (the CLI's
// subcommands and flags, a job file's keys).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace troupe {

// Levenshtein distance (insertions, deletions, substitutions; a swap of neighbours counts 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, when it is near enough to be a typo of it (a third of its
// length, at least 1, at most 3 edits); nullopt otherwise.
std::optional<std::string> nearest(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace troupe
