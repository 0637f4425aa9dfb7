// `troupe config check FILE [--set k=v]...`: loads a job file, applies overrides and validates
// every section troupe knows; prints the effective configuration or one error line (exit 2).
#include <cstdio>
#include <memory>

#include "command.hpp"
#include "job_config_check.hpp"
#include "troupe/job/job_file.hpp"

namespace troupe::cli {
namespace {

struct options {
  std::string file;
  std::vector<std::string> overrides;
  bool print = false;
};

const command_registrar reg{
    "config", "Validate a job file (and --set overrides); print the effective configuration",
    [](CLI::App& sub) -> runner {
      auto o = std::make_shared<options>();
      auto* check = sub.add_subcommand("check", "Validate FILE; exit 2 with one error line if it is invalid");
      check->add_option("file", o->file, "job file (TOML)")->required();
      check->add_option("--set", o->overrides, "override a key: --set job.workers=8 (repeatable)");
      check->add_flag("--print", o->print,
                      "print the effective configuration as TOML: every key, defaults included");
      sub.require_subcommand(1);
      return [o]() -> int {
        quiet_logs();  // its answer is the error, the notes and "ok" (an info line said the plugin loaded)
        auto doc = load_job_doc(o->file, o->overrides);
        if (!doc) return usage_error(doc.err());
        config_doc effective;
        auto notes = validate_job_doc(*doc, &effective);
        if (!notes) return usage_error(notes.err());
        for (const auto& n : *notes) std::fprintf(stderr, "%s: note: %s\n", o->file.c_str(), n.c_str());
        if (o->print) {
          if (auto a = job::absolute_paths(effective); !a) return usage_error(a.err());
          std::printf("%s\n", effective.to_toml().c_str());
        }
        std::printf("%s: ok\n", o->file.c_str());
        return 0;
      };
    }};

}  // namespace
}  // namespace troupe::cli
