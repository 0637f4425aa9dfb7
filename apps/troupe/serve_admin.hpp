// `troupe serve status` and `troupe serve stop` (docs/serving.md), added under `troupe serve`.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "troupe/core/error.hpp"

namespace troupe::cli {

// The server a command without --name means: the only one running under `root`. Errors: none runs
// (io_error: exit 1, as `troupe stop` of no running job), several do (invalid_argument, naming them:
// exit 2).
expected<std::string> only_server(const std::string& command, const std::string& root);

// Adds the two subcommands to `serve`; the returned function runs the one given on the command line
// and returns its exit code (nullopt: neither was given).
std::function<std::optional<int>()> add_serve_admin(CLI::App& serve);

}  // namespace troupe::cli
