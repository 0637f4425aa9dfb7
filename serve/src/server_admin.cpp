// `troupe serve status` and `troupe serve stop`: the servers under a root as their files say, and
// a stop by SIGTERM to the one named (the process a person would signal, checked to be it).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "troupe/cluster/own_path.hpp"
#include "troupe/cluster/process.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/serve/serve.hpp"

namespace troupe::serve {

std::string servers_dir(const std::string& root) {
  return cluster::own_subdir(root, "serve");
}

std::string state_dir(const std::string& root, const std::string& name) {
  return servers_dir(root) + "/" + name;
}

// A shared lock for the moment of the look: lookers (serve status, jobs prune, the dashboard, a
// second `troupe serve` of the name) never take each other for a server, which holds it exclusively.
bool server_running(const std::string& state_dir) {
  const int fd = ::open((state_dir + "/server.lock").c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0;
  ::close(fd);
  return held;
}

bool take_server_lock(int fd, troupe::clock& clk) {
  for (int tries = 0; ::flock(fd, LOCK_EX | LOCK_NB) != 0; ++tries) {
    if (errno != EWOULDBLOCK || tries == 200) return false;
    clk.sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

std::vector<server_entry> list_servers(const std::string& root) {
  std::vector<server_entry> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(servers_dir(root), ec)) {
    if (!e.is_directory(ec) || e.is_symlink(ec)) continue;
    server_entry s;
    s.name = e.path().filename().string();
    s.state_dir = e.path().string();
    s.running = server_running(s.state_dir);
    std::ifstream in(e.path() / "server.json");
    std::stringstream text;
    text << in.rdbuf();
    s.server_json = text.str();
    // A directory with neither (not a server's) is passed over.
    if (!s.running && s.server_json.empty() && !std::filesystem::exists(e.path() / "server.lock", ec))
      continue;
    out.push_back(std::move(s));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return out;
}

namespace {
// The process holding the flock on `path`, from /proc/locks ("1: FLOCK  ADVISORY  WRITE <pid>
// <major>:<minor>:<inode> 0 EOF"); 0 when none does. The server itself, whatever server.json says:
// a pid read from server.json could be another process's (a file edited, or stale).
int flock_holder(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  char want[64];
  std::snprintf(want, sizeof want, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  std::ifstream in("/proc/locks");
  for (std::string line; std::getline(in, line);) {
    std::istringstream f(line);
    std::string n, kind, advisory, mode, where;
    int pid = 0;
    if (f >> n >> kind) {
      if (kind == "->") f >> kind;  // a waiter, listed under the lock it waits for
      if (f >> advisory >> mode >> pid >> where && kind == "FLOCK" && mode == "WRITE" && where == want)
        return pid;
    }
  }
  return 0;
}
}  // namespace

expected<int> stop_server(const std::string& root, const std::string& name,
                          std::chrono::milliseconds timeout) {
  const auto dir = state_dir(root, name);
  const int pid = server_running(dir) ? flock_holder(dir + "/server.lock") : 0;
  if (pid <= 0)
    return make_unexpected(core_errc::io_error,
                           "serve stop: no server named '" + name + "' runs under " + servers_dir(root));
  const auto stat = cluster::read_process_stat(pid);
  if (::kill(pid, SIGTERM) != 0)
    return make_unexpected(core_errc::io_error,
                           "serve stop: SIGTERM to pid " + std::to_string(pid) + ": " + std::strerror(errno));
  auto& clk = troupe::clock::system();
  const auto until = clk.now() + timeout;
  // Until the process is gone, not only its lock: the front end releases the lock as it tears down,
  // and `serve stop` returned while the server was still exiting (a test's poll() right after it
  // found it running, rarely).
  while (stat ? cluster::process_alive(pid, stat->start_time) : server_running(dir)) {
    if (clk.now() >= until) {
      std::ifstream in(dir + "/server.json");
      auto j = nlohmann::json::parse(in, nullptr, false);
      const bool draining = j.is_object() && j.value("state", "") == "draining";
      return make_unexpected(
          core_errc::io_error,
          "serve stop: the server '" + name + "' (pid " + std::to_string(pid) + ") still runs " +
              std::to_string(timeout.count() / 1000) + " s after SIGTERM" +
              (draining ? ": it drains for its drain_ms; stop it again to end the drain now"
                        : "; see " + dir + "/server.json and its log"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pid;
}

}  // namespace troupe::serve
