#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <spdlog/spdlog.h>

#include "command.hpp"
#include "suggest.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/core/log.hpp"
#include "troupe/core/memory.hpp"
#include "troupe/nn/blas.hpp"

namespace troupe::cli {

namespace {
struct entry {
  std::string name, description;
  setup_fn setup;
};
std::vector<entry>& registry() {
  static std::vector<entry> r;
  return r;
}
}  // namespace

command_registrar::command_registrar(std::string name, std::string description, setup_fn setup) {
  registry().push_back({std::move(name), std::move(description), std::move(setup)});
}

int usage_error(const std::string& text) {
  std::fprintf(stderr, "troupe: error: %s\n", text.c_str());
  return 2;
}
int usage_error(const error& e) {
  return usage_error(e.describe());
}

std::string root_override(const std::string& root) {
  std::string quoted = "\"";
  for (char c : root) quoted.append(c == '"' || c == '\\' ? "\\" : "").push_back(c);
  return "job.root=" + quoted + "\"";
}

void quiet_logs() {
  if (spdlog::get_level() == spdlog::level::info) spdlog::set_level(spdlog::level::warn);
}

// The soft limit of open files raised to the hard one (Go's runtime does the same): a 1024 soft
// limit let a local flood of silent connections starve a master and its PS shards of descriptors
// for their checkpoints, and a node of a few thousand peers needs more anyway.
void raise_open_file_limit() {
  rlimit l{};
  if (::getrlimit(RLIMIT_NOFILE, &l) != 0 || l.rlim_cur >= l.rlim_max) return;
  l.rlim_cur = l.rlim_max;
  (void)::setrlimit(RLIMIT_NOFILE, &l);
}

int run_error(const error& e) {
  std::fprintf(stderr, "troupe: error: %s\n", e.describe().c_str());
  return 1;
}

namespace {

using runners = std::vector<std::pair<CLI::App*, runner>>;

// Every registered command as a subcommand of `app`, in name order; each with the runner its
// setup returned.
runners add_commands(CLI::App& app) {
  auto& reg = registry();
  std::sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  runners out;
  for (auto& e : reg) {
    auto* sub = app.add_subcommand(e.name, e.description);
    out.emplace_back(sub, e.setup(*sub));
  }
  return out;
}

// "troupe serve reload": the command line's deepest subcommand parsed so far, for its --help.
std::string command_of(const CLI::App& app) {
  std::string path = "troupe";
  for (const CLI::App* cur = &app;;) {
    auto parsed = cur->get_subcommands();
    if (parsed.empty()) return path;
    cur = parsed.front();
    path.append(" ").append(cur->get_name());
  }
}

// A value given empty (`--out ""`, a script's unset variable) is refused by its flag's name before any
// command runs: `troupe export JOB --out ""` wrote over the job's own model, where "" read as the
// default. The commands troupe starts itself (`node`, `serve-replica`) are left as they are.
// A count given negative (`--records -1`, `--seed -1`) is refused too: CLI11 read it modulo 2^64
// (every record printed, "seed 18446744073709551615").
void check_flag_values(CLI::App& app) {
  static const CLI::Validator non_empty(
      [](std::string& v) {
        return v.empty() ? std::string("empty value (give one, or leave the flag out)") : "";
      },
      "", "NON_EMPTY");
  static const CLI::Validator non_negative(
      [](std::string& v) {
        const auto first = v.find_first_not_of(" \t");
        return first != std::string::npos && v[first] == '-' ? "'" + v + "': expected a number from 0 up"
                                                             : std::string();
      },
      "", "NON_NEGATIVE");
  for (auto* o : app.get_options([](CLI::Option* o) { return o->get_items_expected_max() > 0; })) {
    o->check(non_empty);
    if (o->get_type_name() == "UINT") o->check(non_negative);
    // A repeatable flag takes one value each time: `run --set k=v job.toml` read the job file as a
    // second override ("give a job file or --resume").
    if (o->nonpositional()) o->allow_extra_args(false);
  }
  for (auto* sub : app.get_subcommands(
           [](CLI::App* a) { return a->get_name() != "node" && a->get_name() != "serve-replica"; }))
    check_flag_values(*sub);
}

// Parses the command line; the exit code when this is all (help, version, a usage error: a typo
// gets the nearest subcommand or flag), nullopt when a command is to run.
std::optional<int> parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string command;
    auto hint = suggestion(app, argc, argv, &command);
    return usage_error((hint.empty() ? std::string(e.what()) : hint) + " (run '" +
                       (hint.empty() ? command_of(app) : command) + " --help' for usage)");
  }
  return std::nullopt;
}

// Runs the parsed subcommand; an exception escaping it is an error naming the command.
int run_parsed(const runners& rs) {
  for (const auto& [sub, run] : rs) {
    if (!sub->parsed()) continue;
    try {
      return run();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "troupe: error: %s: %s\n", sub->get_name().c_str(), e.what());
      return 1;
    }
  }
  return usage_error("no subcommand given (run 'troupe --help' for usage)");
}

}  // namespace

}  // namespace troupe::cli

int main(int argc, char** argv) {
  using namespace troupe;
  keep_large_buffers();
  cli::raise_open_file_limit();
  nn::flush_denormals_unless_kept_everywhere();  // every thread of every node, the BLAS pool's too
  actors::register_strategies();                 // before any job file is read: their names
  CLI::App app{
      "troupe: elastic, fault-tolerant distributed training.\n"
      "A job's master, data dispenser, parameter-server shards and workers are supervised\n"
      "actors; workers may be preempted, killed or added while the job runs.",
      "troupe"};
  app.set_version_flag("--version", std::string(TROUPE_VERSION));
  app.require_subcommand(1);
  app.fallthrough();
  // A flag given twice: the last one counts, as wrappers and container args that append an override
  // expect (CLI11's default took the second as a stray argument: "unknown subcommand '<model dir>'").
  // Repeatable flags (--set, --fault) keep every value.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  const auto runners = cli::add_commands(app);
  cli::check_flag_values(app);
  if (auto code = cli::parse(app, argc, argv)) return *code;
  log_config lc;
  lc.level = log_level;
  if (auto r = init_logging(lc); !r) return cli::usage_error(r.err());
  return cli::run_parsed(runners);
}
