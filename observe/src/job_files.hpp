// The dashboard's only way into a jobs root: anyone who can run a job may write its directory, so
// everything there is untrusted input. A file is read only when it is a regular file with one link
// whose every path component below the root is a real directory entry (opened with openat from
// the root's descriptor and O_NOFOLLOW: no symbolic link is ever followed, so nothing outside the
// root is reachable), opened with O_NONBLOCK (a FIFO cannot hang the reader) and checked with
// fstat (no FIFO, socket or device is read), and read with a size cap. Job ids and file names are
// single components (no '/', not "." or ".."); the root itself is the operator's choice and may be
// reached through a link. Only what every user of the host may read, or what the dashboard's own
// user owns, is listed or opened: anyone on the host may ask the dashboard, so it shows no one a
// file its owner kept private.
//
// Errors name the file relative to the root and why it was refused; a missing file is
// std::errc::no_such_file_or_directory (a job that has not written it yet), every refusal
// core_errc::io_error. Nothing here throws. A jobs_root is safe to share between threads (it holds
// one descriptor and never changes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/observe/job_events.hpp"  // json_depth_within

namespace troupe::observe {

// An owned file descriptor.
class unique_fd {
 public:
  unique_fd() = default;
  explicit unique_fd(int fd) : fd_(fd) {}
  unique_fd(unique_fd&& o) noexcept : fd_(o.release()) {}
  unique_fd& operator=(unique_fd&& o) noexcept;
  unique_fd(const unique_fd&) = delete;
  unique_fd& operator=(const unique_fd&) = delete;
  ~unique_fd();
  int get() const { return fd_; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }

 private:
  int fd_ = -1;
};

// A regular file opened for reading, with what fstat said of it when it was opened.
struct job_file {
  unique_fd fd;
  std::uint64_t size = 0, inode = 0;
  std::int64_t mtime_ns = 0;
  std::string name;  // relative to the root, for errors: "<id>/logs/worker-0.log"

  // At most `max` bytes from `offset` (fewer at the end of the file).
  expected<std::string> read(std::uint64_t offset, std::size_t max) const;
};

class job_directory {
 public:
  // Opens `rel` ("events.jsonl", "logs/worker-0.log"): every component a real entry (a directory
  // but the last, a regular file with one link last).
  expected<job_file> open(std::string_view rel) const;
  // open() then the whole file, refused when it is larger than `max`.
  expected<std::string> read_all(std::string_view rel, std::size_t max) const;
  // Its entries that are directories (not links) named like a job id ("serve/<name>" entries).
  expected<std::vector<std::string>> subdirectories() const;
  const std::string& id() const { return id_; }
  // A path naming this very directory (/proc/self/fd/N, valid while this object lives): what is
  // acted on after a check made through this object. By the path <root>/<id>, a directory swapped
  // for a link between the check and the act (another user's, whose token the check had taken)
  // turned a stop of one's own job into a stop of anyone's.
  std::string held_path() const { return "/proc/self/fd/" + std::to_string(fd_->get()); }
  // Whether a process holds the job's runner lock (runner.lock, fcntl: `troupe run` holds it while
  // it runs, from before it prepares the data to its last line).
  bool runner_alive() const;
  // Whether a process holds an exclusive flock on `rel` ("<name>/server.lock": `troupe serve` holds
  // it while it runs). Looked at with a shared lock for a moment, as `troupe serve status` does.
  bool flock_held(std::string_view rel) const;

 private:
  friend class jobs_root;
  job_directory(unique_fd fd, std::string id)
      : fd_(std::make_shared<unique_fd>(std::move(fd))), id_(std::move(id)) {}
  std::shared_ptr<unique_fd> fd_;
  std::string id_;
};

class jobs_root {
 public:
  // Errors: the root is missing or not a directory (naming it).
  static expected<jobs_root> open(const std::string& path);

  // The ids of the job directories: entries with a valid job id that are directories, not links.
  // An unreadable root is an error; an entry that is not a job is left out.
  expected<std::vector<std::string>> job_ids() const;
  // The job's directory (not a link): 404-worthy std::errc::no_such_file_or_directory when there
  // is none, io_error when the entry is something else.
  expected<job_directory> job(const std::string& id) const;
  const std::string& path() const { return path_; }

 private:
  jobs_root(unique_fd fd, std::string path)
      : fd_(std::make_shared<unique_fd>(std::move(fd))), path_(std::move(path)) {}
  std::shared_ptr<unique_fd> fd_;
  std::string path_;
};

// A job id: 1 to 64 of [A-Za-z0-9_.-], not starting with '.'.
bool valid_job_id(std::string_view id);

}  // namespace troupe::observe
