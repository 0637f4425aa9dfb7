// `troupe serve status` and `troupe serve stop` (docs/serving.md), added under `troupe serve`.
#pragma once

#include <functional>
#include <optional>

#include <CLI/CLI.hpp>

namespace troupe::cli {

// Adds the two subcommands to `serve`; the returned function runs the one given on the command line
// and returns its exit code (nullopt: neither was given).
std::function<std::optional<int>()> add_serve_admin(CLI::App& serve);

}  // namespace troupe::cli
