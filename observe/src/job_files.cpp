#include "job_files.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace troupe::observe {

namespace {

error refused(const std::string& name, const std::string& why) {
  return error(std::error_code(core_errc::io_error), name + ": " + why);
}

// Why an open of an untrusted entry failed, for its error.
error open_error(const std::string& name, int e) {
  if (e == ENOENT)
    return error(std::make_error_code(std::errc::no_such_file_or_directory), name + ": missing");
  if (e == ELOOP) return refused(name, "a symbolic link (not followed: it could leave the jobs root)");
  if (e == ENOTDIR) return refused(name, "a path component is not a directory");
  if (e == EACCES)
    return refused(name,
                   "not readable by every user (the dashboard shows its own user's files, and others' "
                   "that everyone may read)");
  return refused(name, std::strerror(e));
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISLNK(m)) return "a symbolic link";
  return "not a regular file";
}

bool single_component(std::string_view c) {
  return !c.empty() && c != "." && c != ".." && c.find('/') == std::string_view::npos &&
         c.find('\0') == std::string_view::npos;
}

// openat of one component without following a link; O_NONBLOCK so that opening a FIFO returns at
// once (a FIFO is then refused by fstat).
// Whether every user of this host may read the entry (a directory: and enter it), or it is the
// dashboard's own user's. Anyone may ask the dashboard on loopback: run by root over a root several
// users share, it served one user's private (0700) job's logs to any other.
bool shown_to_all(const struct stat& st) {
  const mode_t need = S_ISDIR(st.st_mode) ? (S_IROTH | S_IXOTH) : S_IROTH;
  return st.st_uid == ::geteuid() || (st.st_mode & need) == need;
}

int open_component(int dir, std::string_view c, int flags) {
  std::string name(c);
  int fd;
  do {
    fd = ::openat(dir, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  struct stat st {};
  if (fd >= 0 && (::fstat(fd, &st) != 0 || !shown_to_all(st))) {
    ::close(fd);
    errno = EACCES;
    return -1;
  }
  return fd;
}

}  // namespace

unique_fd& unique_fd::operator=(unique_fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.release();
  }
  return *this;
}

unique_fd::~unique_fd() {
  if (fd_ >= 0) ::close(fd_);
}

expected<std::string> job_file::read(std::uint64_t offset, std::size_t max) const {
  std::string out;
  if (offset >= size) return out;
  // The size fstat saw when the file was opened bounds the read: a file growing meanwhile is read
  // up to that size (the rest on the next request).
  out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(max, size - offset)));
  std::size_t got = 0;
  while (got < out.size()) {
    ssize_t n = ::pread(fd.get(), out.data() + got, out.size() - got, static_cast<off_t>(offset + got));
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0) return refused(name, std::string("read: ") + std::strerror(errno));
    if (n == 0) break;  // truncated meanwhile
    got += static_cast<std::size_t>(n);
  }
  out.resize(got);
  return out;
}

expected<job_file> job_directory::open(std::string_view rel) const {
  std::string name = id_ + "/" + std::string(rel);
  unique_fd dir;  // the current directory when below the job's own
  int at = fd_->get();
  while (true) {
    auto slash = rel.find('/');
    std::string_view c = rel.substr(0, slash);
    if (!single_component(c)) return refused(name, "not a plain relative path");
    if (slash == std::string_view::npos) {
      // Refused before opening when it is not a regular file (opening a device may do something);
      // checked again on the descriptor, which is what is read.
      struct stat st {};
      if (::fstatat(at, std::string(c).c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0)
        return open_error(name, errno);
      if (!S_ISREG(st.st_mode))
        return refused(name, std::string(kind_of(st.st_mode)) + ", not a regular file");
      int fd = open_component(at, c, O_RDONLY);
      if (fd < 0) return open_error(name, errno);
      job_file f;
      f.fd = unique_fd(fd);
      f.name = name;
      if (::fstat(fd, &st) != 0) return refused(name, std::strerror(errno));
      if (!S_ISREG(st.st_mode))
        return refused(name, std::string(kind_of(st.st_mode)) + ", not a regular file");
      // A hard link may name a file outside the root that the job's writer could not read itself.
      if (st.st_nlink != 1)
        return refused(name, "a file with several hard links (one may be outside the jobs root)");
      f.size = static_cast<std::uint64_t>(st.st_size);
      f.inode = static_cast<std::uint64_t>(st.st_ino);
      f.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
      return f;
    }
    int fd = open_component(at, c, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return open_error(name, errno);
    dir = unique_fd(fd);
    at = fd;
    rel = rel.substr(slash + 1);
  }
}

bool job_directory::runner_alive() const {
  auto f = open("runner.lock");
  if (!f) return false;
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  return ::fcntl(f->fd.get(), F_GETLK, &l) == 0 && l.l_type != F_UNLCK;
}

bool job_directory::flock_held(std::string_view rel) const {
  auto f = open(rel);
  return f && ::flock(f->fd.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

expected<std::string> job_directory::read_all(std::string_view rel, std::size_t max) const {
  auto f = open(rel);
  if (!f) return std::move(f).err();
  if (f->size > max)
    return refused(f->name, std::to_string(f->size) + " bytes, more than the " + std::to_string(max) +
                                " this dashboard reads");
  return f->read(0, max);
}

expected<jobs_root> jobs_root::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT)
      return make_unexpected(core_errc::invalid_argument, "the jobs root " + path + " does not exist");
    if (e == ENOTDIR)
      return make_unexpected(core_errc::invalid_argument, "the jobs root " + path + " is not a directory");
    return make_unexpected(core_errc::io_error, "the jobs root " + path + ": " + std::strerror(e));
  }
  return jobs_root(unique_fd(fd), path);
}

namespace {

// The entries of the directory `dir_fd` that are directories (not links) with a valid job id.
expected<std::vector<std::string>> subdirectories_of(int dir_fd, const std::string& name) {
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return make_unexpected(core_errc::io_error, name + ": " + std::strerror(errno));
  DIR* d = ::fdopendir(fd);
  if (!d) {
    int e = errno;
    ::close(fd);
    return make_unexpected(core_errc::io_error, name + ": " + std::strerror(e));
  }
  std::vector<std::string> ids;
  while (dirent* e = ::readdir(d)) {
    std::string entry = e->d_name;
    if (!valid_job_id(entry)) continue;
    struct stat st {};
    // Not the type readdir gives: some filesystems leave it unknown.
    if (::fstatat(dir_fd, entry.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode) &&
        shown_to_all(st))
      ids.push_back(std::move(entry));
  }
  ::closedir(d);
  return ids;
}

}  // namespace

expected<std::vector<std::string>> jobs_root::job_ids() const {
  return subdirectories_of(fd_->get(), path_);
}

expected<std::vector<std::string>> job_directory::subdirectories() const {
  return subdirectories_of(fd_->get(), id_);
}

expected<job_directory> jobs_root::job(const std::string& id) const {
  if (!valid_job_id(id)) return make_unexpected(core_errc::invalid_argument, "bad job id");
  int fd = open_component(fd_->get(), id, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return open_error(id, errno);
  return job_directory(unique_fd(fd), id);
}

bool valid_job_id(std::string_view id) {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

bool json_depth_within(std::string_view text, std::size_t max_depth) {
  std::size_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return false;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return true;
}

}  // namespace troupe::observe
