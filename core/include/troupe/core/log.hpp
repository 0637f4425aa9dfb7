// Logging on spdlog: one process-wide logger writing to stderr and, for a node of a job, to
// `<job dir>/logs/<node>.log`. Use spdlog's free functions (spdlog::info(...)) after init_logging.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

#include "troupe/core/config.hpp"
#include "troupe/core/error.hpp"

namespace troupe {

struct log_config {
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
  std::string file;            // empty: no log file
  bool to_stderr = true;
  std::string stderr_level;     // empty: `level`; else stderr's own, above it (the file keeps more)
  std::string name = "troupe";  // shown in every line (the node name)
  // Shown before the name in the `file`'s lines ("[job-x/worker-0#1]"): several jobs may share the
  // file, and their lines mixed with nothing to tell them apart. Job ids hold no '%'.
  std::string job;

  // Reads [log] level/file/stderr.
  static log_config read(config_section s, log_config defaults);
};

// Replaces the default logger. Fails (naming the level or file) on a bad level or an unwritable file.
expected<void> init_logging(const log_config& cfg);

// Parses a level name; error names the bad value.
expected<spdlog::level::level_enum> parse_log_level(const std::string& name);

}  // namespace troupe
