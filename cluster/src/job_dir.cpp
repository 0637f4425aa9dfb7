#include "troupe/cluster/job_dir.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/own_path.hpp"

namespace troupe::cluster {

namespace fs = std::filesystem;

namespace {
unexpected io_fail(const std::string& path, const std::string& step, int err) {
  if (err == ENOSPC || err == EDQUOT)
    return make_unexpected(
        cluster_errc::io_error,
        std::string("no space left on device: ").append(path).append(" (").append(step).append(")"));
  return make_unexpected(cluster_errc::io_error, path + ": " + step + ": " + std::strerror(err));
}

expected<void> write_all(int fd, std::string_view content, const std::string& path) {
  while (!content.empty()) {
    ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return io_fail(path, "write", errno);
    content.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

expected<std::string> read_text(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return make_unexpected(cluster_errc::missing_file, path + ": does not exist");
  std::ifstream in(path, std::ios::binary);
  if (!in) return io_fail(path, "open", errno);
  std::stringstream s;
  s << in.rdbuf();
  if (in.bad()) return io_fail(path, "read", errno);
  return s.str();
}

// A new file beside `path` that nobody else made: a random name, created exclusively and never
// through a link (a predictable name that followed links let another user who owns the directory
// have root's `troupe stop` overwrite any file). Its mode is `mode` from the start.
expected<std::pair<int, std::string>> create_temporary(const std::string& path, unsigned mode) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  int err = EEXIST;
  for (int attempt = 0; attempt < 16 && err == EEXIST; ++attempt) {
    std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(rng() % 1000000007);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) return std::pair{fd, std::move(tmp)};
    err = errno;
  }
  return io_fail(path + ".tmp.*", "create", err);
}
}  // namespace

expected<void> write_file_atomic(const std::string& path, std::string_view content, unsigned mode) {
  auto made = create_temporary(path, mode);
  if (!made) return made.err();
  const auto [fd, tmp] = std::move(*made);
  // Errors name the file being written, not its temporary (a disk-fault reason named
  // counters.json.tmp.757.<random>, which no one can find afterwards).
  auto ok = write_all(fd, content, path);
  if (ok && ::fsync(fd) != 0) ok = io_fail(path, "fsync", errno);
  ::close(fd);
  if (ok && ::rename(tmp.c_str(), path.c_str()) != 0) ok = io_fail(path, "rename", errno);
  if (!ok) {
    ::unlink(tmp.c_str());
    return ok;
  }
  // Make the rename itself durable.
  std::string dir = fs::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

bool valid_job_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
  });
}

expected<job_dir> job_dir::create(const std::string& root, const std::string& job_id,
                                  std::string_view job_toml) {
  if (!valid_job_id(job_id))
    return make_unexpected(
        cluster_errc::invalid_spec,
        "job id '" + job_id + "': 1-64 characters of a-z, A-Z, 0-9, '_', '-', '.', not starting with '.'");
  job_dir d(root + "/" + job_id, job_id);
  std::error_code ec;
  if (fs::exists(d.job_toml_path(), ec))
    return make_unexpected(cluster_errc::already_exists, d.path() + ": a job directory already exists there");
  if (auto why = not_own(d.path()); !why.empty())
    return make_unexpected(cluster_errc::invalid_spec,
                           d.path() + ": " + why + ": not written into (pick another id or root)");
  for (const auto& sub : {d.logs_dir(), d.journal_dir(), d.checkpoints_dir()}) {
    fs::create_directories(sub, ec);
    if (ec) return make_unexpected(cluster_errc::io_error, sub + ": cannot create: " + ec.message());
  }
  if (auto ok = write_file_atomic(d.job_toml_path(), job_toml); !ok) return ok.err();
  return d;
}

expected<job_dir> job_dir::open(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  std::error_code ec;
  if (!fs::is_directory(p, ec))
    return make_unexpected(cluster_errc::missing_file, p + ": no such job directory");
  // A directory reached through its descriptor (the dashboard's /proc/self/fd/N: the job it looked
  // at, whatever is renamed meanwhile) is named by what it holds ("job 9 is not running", and the
  // dead job's /dev/shm names looked for under "9").
  std::string id = fs::path(p).filename().string();
  if (p.rfind("/proc/self/fd/", 0) == 0)
    if (auto target = fs::read_symlink(p, ec); !ec && !target.filename().empty())
      id = target.filename().string();
  job_dir d(p, id);
  if (!fs::is_regular_file(d.job_toml_path(), ec))
    return make_unexpected(cluster_errc::missing_file,
                           d.job_toml_path() + ": missing (not a job directory?)");
  for (const auto& sub : {d.logs_dir(), d.journal_dir(), d.checkpoints_dir()})
    if (!fs::is_directory(sub, ec))
      return make_unexpected(cluster_errc::missing_file, sub + ": missing directory");
  return d;
}

expected<std::vector<std::string>> job_dir::list(const std::string& root) {
  std::error_code ec;
  if (!fs::exists(root, ec)) return std::vector<std::string>{};
  std::vector<std::pair<fs::file_time_type, std::string>> found;
  fs::directory_iterator it(root, ec), end;
  if (ec) return make_unexpected(cluster_errc::io_error, root + ": cannot list: " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec) return make_unexpected(cluster_errc::io_error, root + ": cannot list: " + ec.message());
    if (it->path().filename().string().front() == '.') continue;  // never a job id (remove_unless_running)
    auto toml = it->path() / "job.toml";
    std::error_code e2;
    if (!it->is_directory(e2) || !fs::is_regular_file(toml, e2)) continue;
    auto nodes = it->path() / "nodes.json";
    auto t = fs::exists(nodes, e2) ? fs::last_write_time(nodes, e2) : fs::last_write_time(toml, e2);
    found.emplace_back(t, it->path().filename().string());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> ids;
  for (auto& [t, id] : found) ids.push_back(std::move(id));
  return ids;
}

expected<std::string> job_dir::read_job_toml() const {
  return read_text(job_toml_path());
}

expected<void> job_dir::write_nodes(const nodes_file& f) const {
  return write_file_atomic(nodes_path(), to_json(f));
}

expected<nodes_file> job_dir::read_nodes() const {
  auto text = read_text(nodes_path());
  if (!text) return text.err();
  return parse_nodes_json(*text, nodes_path());
}

namespace {
struct flock whole_file(short type) {
  struct flock l {};
  l.l_type = type;
  l.l_whence = SEEK_SET;
  l.l_start = 0;
  l.l_len = 0;
  return l;
}
}  // namespace

unexpected job_dir::removed_as_started() const {
  return make_unexpected(
      cluster_errc::missing_file,
      "job " + job_id_ + ": " + path_ + " was removed as its runner started (troupe jobs prune?)");
}

expected<int> job_dir::try_lock() const {
  int fd = ::open(lock_path().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ENOENT) return removed_as_started();
  if (fd < 0) return io_fail(lock_path(), "open", errno);
  auto l = whole_file(F_WRLCK);
  if (::fcntl(fd, F_SETLK, &l) == 0) return fd;
  int err = errno;
  ::close(fd);
  if (err != EACCES && err != EAGAIN) return io_fail(lock_path(), "lock", err);
  return -1;
}

expected<int> job_dir::lock_runner() const {
  // remove_unless_running() holds the lock for a moment while it decides: that is waited out.
  expected<int> fd = -1;
  for (int tries = 0; tries < 10; ++tries) {
    if (tries > 0) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    fd = try_lock();
    if (!fd || *fd >= 0) break;
  }
  if (!fd) return fd.err();
  if (*fd < 0) {
    auto pid = runner_pid();
    return make_unexpected(cluster_errc::already_exists, "job " + job_id_ + " is running: its runner (pid " +
                                                             (pid ? std::to_string(*pid) : "?") + ") holds " +
                                                             lock_path());
  }
  // The file locked is still the directory's runner.lock: remove_unless_running() did not set the
  // directory aside between the open and the lock.
  struct stat held {
  }, now{};
  if (::fstat(*fd, &held) != 0 || ::stat(lock_path().c_str(), &now) != 0 || held.st_ino != now.st_ino ||
      held.st_dev != now.st_dev) {
    ::close(*fd);
    return removed_as_started();
  }
  return fd;
}

expected<bool> job_dir::set_aside_and_remove(int lock_fd, bool go) const {
  if (!go) {
    ::close(lock_fd);
    return false;
  }
  const auto aside = (fs::path(path_).parent_path() /
                      (std::string(removing_prefix) + job_id_ + "-" + std::to_string(::getpid())))
                         .string();
  const int renamed = ::rename(path_.c_str(), aside.c_str()) == 0 ? 0 : errno;
  ::close(lock_fd);  // a runner waiting on it now finds its lock file gone
  if (renamed != 0) return io_fail(path_, "rename to " + aside, renamed);
  std::error_code ec;
  fs::remove_all(aside, ec);
  if (ec)
    return make_unexpected(cluster_errc::io_error,
                           aside + " (" + path_ + ", set aside to be removed): " + ec.message());
  return true;
}

bool job_dir::left_by_dead_remover(std::string_view name) {
  if (name.substr(0, removing_prefix.size()) != removing_prefix) return false;
  const auto dash = name.rfind('-');
  const auto pid_text = std::string(name.substr(dash + 1));
  if (pid_text.empty() || pid_text.find_first_not_of("0123456789") != std::string::npos) return false;
  const long pid = std::strtol(pid_text.c_str(), nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

std::optional<int> job_dir::runner_pid() const {
  int fd = ::open(lock_path().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  auto l = whole_file(F_WRLCK);
  bool held = ::fcntl(fd, F_GETLK, &l) == 0 && l.l_type != F_UNLCK;
  ::close(fd);
  if (!held) return std::nullopt;
  return static_cast<int>(l.l_pid);
}

std::string job_dir::read_instance() const {
  auto text = read_text(instance_path());
  if (!text) return {};
  auto& s = *text;
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

expected<void> job_dir::write_instance(std::string_view instance) const {
  return write_file_atomic(instance_path(), std::string(instance) + "\n");
}

}  // namespace troupe::cluster
