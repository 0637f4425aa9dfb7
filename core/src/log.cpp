#include "troupe/core/log.hpp"

#include <filesystem>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace troupe {

log_config log_config::read(config_section s, log_config defaults) {
  log_config c = std::move(defaults);
  c.level = s.get_enum("level", c.level, {"trace", "debug", "info", "warn", "error", "critical", "off"});
  c.file = s.get_string("file", c.file);
  c.to_stderr = s.get_bool("stderr", c.to_stderr);
  return c;
}

expected<spdlog::level::level_enum> parse_log_level(const std::string& name) {
  static const char* names[] = {"trace", "debug", "info", "warn", "error", "critical", "off"};
  for (int i = 0; i < 7; ++i)
    if (name == names[i]) return static_cast<spdlog::level::level_enum>(i);
  return make_unexpected(
      core_errc::invalid_argument,
      "log level '" + name + "': expected trace, debug, info, warn, error, critical or off");
}

expected<void> init_logging(const log_config& cfg) {
  auto level = parse_log_level(cfg.level);
  if (!level) return level.err();
  std::vector<spdlog::sink_ptr> sinks;
  if (cfg.to_stderr) sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (cfg.to_stderr && !cfg.stderr_level.empty()) {
    auto l = parse_log_level(cfg.stderr_level);
    if (!l) return l.err();
    sinks.back()->set_level(*l);
  }
  spdlog::sink_ptr file;
  if (!cfg.file.empty()) {
    try {
      auto parent = std::filesystem::path(cfg.file).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent);
      file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(cfg.file, false);
      sinks.push_back(file);
    } catch (const std::exception& e) {
      return make_unexpected(core_errc::io_error, "log file " + cfg.file + ": " + e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>(cfg.name, sinks.begin(), sinks.end());
  logger->set_level(*level);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%L%$ [%n] %v");
  if (file && !cfg.job.empty()) file->set_pattern("%Y-%m-%d %H:%M:%S.%e %L [" + cfg.job + "/%n] %v");
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
  return {};
}

}  // namespace troupe
