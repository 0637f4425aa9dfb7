// "Did you mean ...?" for a mistyped subcommand or flag: the nearest known name by edit distance.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Levenshtein distance (insertions, deletions, substitutions; a swap of neighbours counts 1).
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `word`, when it is near enough to be a typo of it (a third of its
// length, at least 1, at most 3 edits); nullopt otherwise.
std::optional<std::string> nearest(std::string_view word, const std::vector<std::string>& candidates);

// For a command line CLI11 refused: the first word that is not a subcommand of where it stands or
// a flag of the subcommands given so far, with the nearest that is: "unknown subcommand 'statsu'
// (did you mean 'status'?)". "" when no word is wrong or none is near.
std::string suggestion(CLI::App& app, int argc, const char* const* argv);

}  // namespace troupe::cli
