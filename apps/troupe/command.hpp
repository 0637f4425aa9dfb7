// Subcommand registration for the `troupe` CLI. A subcommand file defines one static
// `command_registrar` whose setup function declares the subcommand's flags on the CLI11 app it is
// given and returns the function that runs it (returning the process exit code).
//
// Exit codes: 0 success, 1 the work failed, 2 bad usage/flags/config (one line on stderr).
#pragma once

#include <functional>
#include <string>

#include <CLI/CLI.hpp>

#include "troupe/core/error.hpp"

namespace troupe::cli {

using runner = std::function<int()>;
using setup_fn = std::function<runner(CLI::App& sub)>;

struct command_registrar {
  command_registrar(std::string name, std::string description, setup_fn setup);
};

// Prints "troupe: error: <text>" to stderr and returns 2 (bad usage, flags or config).
int usage_error(const std::string& text);
int usage_error(const error& e);
// Prints "troupe: error: <text>" to stderr and returns 1 (the work itself failed).
int run_error(const error& e);
// `--root DIR` of a command that starts a job (run, chaos --job): the `--set` override
// `job.root="DIR"` (quoted for TOML).
std::string root_override(const std::string& root);
// Client commands (status, scale, stop, serve reload) print their answer; connection chatter
// ("transport: peer ... up") is for --log-level debug.
void quiet_logs();
// main(): the soft limit of open files raised to the hard one (every command and node).
void raise_open_file_limit();

}  // namespace troupe::cli
