// `troupe serve status` and `troupe serve stop`: the servers under a root as their files say, and
// a stop by SIGTERM to the one named (the process a person would signal, checked to be it).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "troupe/cluster/process.hpp"
#include "troupe/core/clock.hpp"
#include "troupe/serve/serve.hpp"

namespace troupe::serve {

bool server_running(const std::string& state_dir) {
  const int fd = ::open((state_dir + "/server.lock").c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0;
  ::close(fd);
  return held;
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

expected<int> stop_server(const std::string& root, const std::string& name,
                          std::chrono::milliseconds timeout) {
  const auto dir = state_dir(root, name);
  if (!server_running(dir))
    return make_unexpected(core_errc::invalid_argument,
                           "serve stop: no server named '" + name + "' runs under " + servers_dir(root));
  std::ifstream in(dir + "/server.json");
  auto j = nlohmann::json::parse(in, nullptr, false);
  const int pid = j.is_object() ? j.value("pid", 0) : 0;
  const std::uint64_t start = j.is_object() ? j.value("start_time", std::uint64_t{0}) : 0;
  // Until its first model is up the server has written no server.json of its own (an earlier
  // run's may stand there): its pid is not known yet.
  if (pid <= 0 || start == 0 || j.value("state", "") == "stopped" || !cluster::process_alive(pid, start))
    return make_unexpected(core_errc::io_error,
                           "serve stop: the server '" + name +
                               "' is starting (its first model loading): its pid is not in " + dir +
                               "/server.json yet; try again in a moment");
  if (::kill(pid, SIGTERM) != 0)
    return make_unexpected(core_errc::io_error,
                           "serve stop: SIGTERM to pid " + std::to_string(pid) + ": " + std::strerror(errno));
  auto& clk = troupe::clock::system();
  const auto until = clk.now() + timeout;
  while (cluster::process_alive(pid, start)) {
    if (clk.now() >= until)
      return make_unexpected(core_errc::io_error,
                             "serve stop: the server '" + name + "' (pid " + std::to_string(pid) +
                                 ") still runs " + std::to_string(timeout.count() / 1000) +
                                 " s after SIGTERM; see " + dir + "/server.json and its log");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pid;
}

}  // namespace troupe::serve
