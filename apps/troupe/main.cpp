#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <vector>

#include "command.hpp"
#include "suggest.hpp"
#include "troupe/core/log.hpp"
#include "troupe/core/memory.hpp"

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
  return usage_error(e.to_string());
}
int run_error(const error& e) {
  std::fprintf(stderr, "troupe: error: %s\n", e.to_string().c_str());
  return 1;
}

}  // namespace troupe::cli

int main(int argc, char** argv) {
  using namespace troupe;
  keep_large_buffers();
  CLI::App app{
      "troupe: elastic, fault-tolerant distributed training.\n"
      "A job's master, data dispenser, parameter-server shards and workers are supervised\n"
      "actors; workers may be preempted, killed or added while the job runs.",
      "troupe"};
  app.set_version_flag("--version", std::string(TROUPE_VERSION));
  app.require_subcommand(1);
  app.fallthrough();
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));

  auto& reg = cli::registry();
  std::sort(reg.begin(), reg.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::pair<CLI::App*, cli::runner>> runners;
  for (auto& e : reg) {
    auto* sub = app.add_subcommand(e.name, e.description);
    runners.emplace_back(sub, e.setup(*sub));
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    auto hint = cli::suggestion(app, argc, argv);  // a typo: the nearest subcommand or flag
    return cli::usage_error((hint.empty() ? std::string(e.what()) : hint) +
                            " (run 'troupe --help' for usage)");
  }

  log_config lc;
  lc.level = log_level;
  if (auto r = init_logging(lc); !r) return cli::usage_error(r.err());

  for (auto& [sub, run] : runners) {
    if (sub->parsed()) {
      try {
        return run();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "troupe: error: %s: %s\n", sub->get_name().c_str(), e.what());
        return 1;
      }
    }
  }
  return cli::usage_error("no subcommand given (run 'troupe --help' for usage)");
}
