#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include <spdlog/spdlog.h>

#include "troupe/actors/backends.hpp"
#include "troupe/actors/node.hpp"
#include "troupe/cluster/standby.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/core/log.hpp"
#include "troupe/job/job_file.hpp"

namespace troupe::actors {

namespace {

// The process's stdout and stderr appended to `path` from now on; stdin on /dev/null, as for a
// node the launcher started itself.
void redirect(const std::string& path) {
  if (!path.empty()) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      std::fflush(stdout);
      std::fflush(stderr);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::close(fd);
    } else {
      spdlog::warn("standby: log file {} cannot be opened; the node logs here", path);
    }
  }
  int null = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null >= 0) {
    ::dup2(null, 0);
    ::close(null);
  }
}

}  // namespace

expected<std::vector<std::string>> become_node(const node_options& o, std::string& note) {
  // Real times for the log (the node and its clock do not exist yet).
  troupe::clock& clk = troupe::clock::system();
  auto t0 = clk.now();
  std::string loaded;
  if (auto spec = job::load_job_spec(o.job_dir)) {
    log_config lc = spec->log;
    lc.name = "standby";
    (void)init_logging(lc);
    loaded = preload_host_backend(*spec, o.train_dir);
  } else {
    spdlog::warn("standby: {}", spec.err().to_string());
  }
  if (loaded.empty()) loaded = "nothing preloaded";
  auto ready = clk.now();
  spdlog::info("standby pid {}: {}; waiting for an identity", ::getpid(), loaded);
  auto id = cluster::read_standby_identity(0);
  if (!id) return id.err();
  auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(clk.now() - ready);
  redirect(id->log_file);
  for (const auto& [k, v] : id->env) ::setenv(k.c_str(), v.c_str(), 1);
  note = "started from a standby (pid " + std::to_string(::getpid()) + ": " + loaded + ", " +
         std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(ready - t0).count()) +
         " ms in all, then waited " + std::to_string(waited.count()) + " ms for this identity)";
  return std::move(id->argv);
}

}  // namespace troupe::actors
