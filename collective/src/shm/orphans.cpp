// sweep_orphaned_shm (troupe/collective/cleanup.hpp): the job instances in /dev/shm that nothing on
// this host holds, swept whole.
#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "troupe/collective/cleanup.hpp"

namespace troupe::collective {
namespace {

namespace fs = std::filesystem;

// The inodes of /dev/shm files some process has open or mapped (those this user may read: its own
// processes, every one for root).
std::set<ino_t> held_inodes(dev_t shm_dev) {
  std::set<ino_t> held;
  std::error_code ec;
  for (const auto& p : fs::directory_iterator("/proc", ec)) {
    const auto pid = p.path().filename().string();
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0]))) continue;
    for (const auto& fd : fs::directory_iterator(p.path() / "fd", ec)) {
      struct stat st {};
      if (::stat(fd.path().c_str(), &st) == 0 && st.st_dev == shm_dev) held.insert(st.st_ino);
    }
    ec.clear();
    std::ifstream maps(p.path() / "maps");
    for (std::string line; std::getline(maps, line);) {
      if (line.find("/dev/shm/") == std::string::npos) continue;
      std::istringstream f(line);
      std::string range, perms, offset, dev;
      unsigned long long inode = 0;
      if (f >> range >> perms >> offset >> dev >> inode) held.insert(static_cast<ino_t>(inode));
    }
  }
  return held;
}

// "troupe-<job id>@<instance>-<rest>" -> "<job id>@<instance>"; "" for any other name (a job id and
// an instance, hex digits as runners write them, both there).
std::string instance_of(const std::string& name) {
  if (name.rfind("troupe-", 0) != 0) return "";
  const auto at = name.find('@');
  if (at == std::string::npos || at == 7) return "";
  const auto end = name.find('-', at);
  if (end == std::string::npos || end == at + 1) return "";
  const auto instance = name.substr(at + 1, end - at - 1);
  if (instance.find_first_not_of("0123456789abcdef") != std::string::npos) return "";
  return name.substr(7, end - 7);
}

struct instance_files {
  std::vector<fs::path> paths;
  std::uintmax_t bytes = 0;
  bool keep = false;  // held, another user's, or too new
};

}  // namespace

shm_orphans sweep_orphaned_shm(std::chrono::seconds min_age, bool dry_run, std::uintmax_t min_bytes) {
  shm_orphans out;
  struct stat dir {};
  if (::stat("/dev/shm", &dir) != 0) return out;
  std::map<std::string, instance_files> by_instance;
  const auto now = std::time(nullptr);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev/shm", ec)) {
    const auto key = instance_of(e.path().filename().string());
    struct stat st {};
    if (key.empty() || ::lstat(e.path().c_str(), &st) != 0) continue;
    auto& f = by_instance[key];
    f.paths.push_back(e.path());
    f.bytes += static_cast<std::uintmax_t>(st.st_size);
    f.keep =
        f.keep || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid() || now - st.st_mtime < min_age.count();
  }
  // The walk of /proc only when some instance may go (each run's start sweeps: most find none).
  struct statvfs fs {};
  const bool filling = ::statvfs("/dev/shm", &fs) == 0 && fs.f_bavail * 4 < fs.f_blocks;
  bool any = false;
  for (auto& [key, f] : by_instance) {
    f.keep = f.keep || (f.bytes < min_bytes && !filling);
    any = any || !f.keep;
  }
  if (!any) return out;
  const auto held = held_inodes(dir.st_dev);  // after the listing: a name made since is not in it
  for (auto& [key, f] : by_instance) {
    for (const auto& p : f.paths) {
      struct stat st {};
      f.keep = f.keep || ::lstat(p.c_str(), &st) != 0 || held.count(st.st_ino) > 0;
    }
    if (f.keep) continue;
    for (const auto& p : f.paths)
      if (dry_run || fs::remove(p, ec)) ++out.names;
    out.bytes += f.bytes;
    out.instances.push_back(key);
  }
  return out;
}

}  // namespace troupe::collective
