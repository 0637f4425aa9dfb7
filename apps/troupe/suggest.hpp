// "Did you mean ...?" for a mistyped subcommand or flag: the nearest known name by edit distance.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "troupe/core/nearest.hpp"

namespace troupe::cli {

using troupe::edit_distance;
using troupe::nearest;

// For a command line CLI11 refused: the first word that is not a subcommand of where it stands or
// a flag of the subcommands given so far, with the nearest that is: "unknown subcommand 'statsu'
// (did you mean 'status'?)". "" when no word is wrong or none is near.
// `command`, when given, gets the command the wrong word was given to ("troupe", "troupe data"): its
// --help is the one to point at (`troupe exprot jobs` pointed at 'troupe jobs --help').
std::string suggestion(CLI::App& app, int argc, const char* const* argv, std::string* command = nullptr);

}  // namespace troupe::cli
