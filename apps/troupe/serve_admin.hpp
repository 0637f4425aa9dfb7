// `troupe serve status` and `troupe serve stop` (docs/serving.md), added under `troupe serve`.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

namespace troupe::cli {

// The server a command without --name means: the only one running under `root`; "" after the error
// is printed (exit 2: none runs, or several do, named).
std::string only_server(const std::string& command, const std::string& root);

// Adds the two subcommands to `serve`; the returned function runs the one given on the command line
// and returns its exit code (nullopt: neither was given).
std::function<std::optional<int>()> add_serve_admin(CLI::App& serve);

}  // namespace troupe::cli
