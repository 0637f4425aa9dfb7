// Fixtures shared by the launcher tests: an exit-report collector, node specs, stand-in tools.
#pragma once

#include <sys/stat.h>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "test_util.hpp"
#include "troupe/cluster/local/launcher.hpp"

namespace troupe::cluster::testing {

// Collects exit reports from the launcher's thread.
struct exit_log {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<node_handle, exit_status>> reports;

  exit_callback callback() {
    return [this](const node_handle& h, const exit_status& s) {
      std::lock_guard lock(mu);
      reports.emplace_back(h, s);
      cv.notify_all();
    };
  }
  std::optional<exit_status> wait_for(const node_handle& h, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu);
    std::optional<exit_status> found;
    cv.wait_for(lock, timeout, [&] {
      for (auto& [rh, s] : reports)
        if (rh == h) found = s;
      return found.has_value();
    });
    return found;
  }
  std::size_t size() {
    std::lock_guard lock(mu);
    return reports.size();
  }
};

inline std::unique_ptr<local_launcher> make(exit_log& log,
                                            std::optional<resources> cap = resources{64, 1ull << 40, 0}) {
  auto l = local_launcher::create({log.callback(), cap});
  EXPECT_TRUE(l) << l.err().to_string();
  return std::move(*l);
}

inline node_spec shell(std::string name, std::string script, std::string log_file = "") {
  node_spec s;
  s.id = {std::move(name), 0};
  s.program = "/bin/sh";
  s.argv = {"sh", "-c", std::move(script)};
  s.log_file = std::move(log_file);
  return s;
}

inline node_spec sleeper(std::string name) {
  return shell(std::move(name), "exec sleep 1000");
}

// An executable shell script `dir`/`name` (stand-ins for Slurm's commands through slurm::options::bin_dir).
inline void write_tool(const std::string& dir, const std::string& name, const std::string& body) {
  const std::string path = dir + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
}

}  // namespace troupe::cluster::testing
