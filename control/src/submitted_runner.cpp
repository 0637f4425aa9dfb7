#include "submitted_runner.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <utility>

namespace troupe::control {

namespace {
std::filesystem::path normal_dir(const std::string& job_dir) {
  auto p = std::filesystem::path(job_dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "jobs/x/"
  return p;
}
}  // namespace

std::string job_dir_name(const std::string& job_dir) {
  return normal_dir(job_dir).filename().string();
}

std::string submitted_runner_path(const std::string& job_dir) {
  const auto p = normal_dir(job_dir);
  return (p.parent_path() / (p.filename().string() + ".runner.job")).string();
}

submitted_runner::submitted_runner(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);  // not through a link
  if (fd_ >= 0) (void)::flock(fd_, LOCK_EX);  // held until record() or this object goes
}

submitted_runner::~submitted_runner() {
  if (fd_ >= 0) ::close(fd_);
}

std::string submitted_runner::busy(const cluster::cluster_config& cfg, const std::string& what) const {
  char buf[32] = {};
  if (fd_ < 0 || ::pread(fd_, buf, sizeof buf - 1, 0) <= 0) return {};
  const long job = std::strtol(buf, nullptr, 10);
  if (job <= 0) return {};
  auto state = cluster::slurm_job_state(cfg, job);
  if (!state || state->empty() || cluster::slurm_state_is_final(*state)) return {};
  return what + ": its runner is already submitted as Slurm job " + std::to_string(job) + " (" + *state +
         "), recorded in " + path_ +
         ": wait for it (troupe status once it runs) or cancel it first (troupe "
         "stop --job-dir, or scancel " +
         std::to_string(job) + ")";
}

void submitted_runner::record(long job, const cluster::cluster_config& cfg) {
  if (fd_ < 0) return;
  const std::string text = std::to_string(job) + "\n" + cfg.slurm_bin_dir + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, text.data(), text.size(), 0);
  ::close(std::exchange(fd_, -1));
}

bool recorded_runner::final() const {
  return state.empty() || cluster::slurm_state_is_final(state);
}

namespace {
// The record's text when this user wrote it: a regular file of theirs (not through a link) that no
// one else may write. Its second line names the directory whose scancel and squeue run: another
// user's record in a shared root would have root's `troupe stop` run their programs, or cancel a job
// of root's. "" otherwise.
std::string own_record(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return {};
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && (st.st_mode & 022) == 0) {
    char buf[4096];
    const auto n = ::read(fd, buf, sizeof buf);
    if (n > 0) text.assign(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}
}  // namespace

std::optional<recorded_runner> read_recorded_runner(const std::string& job_dir) {
  recorded_runner r;
  r.record = submitted_runner_path(job_dir);
  std::istringstream in(own_record(r.record));
  std::string first;
  if (!std::getline(in, first)) return std::nullopt;
  char* end = nullptr;
  r.job = std::strtol(first.c_str(), &end, 10);
  if (r.job <= 0 || *end != '\0') return std::nullopt;
  std::getline(in, r.cluster.slurm_bin_dir);  // absent in a record of before 2026-12-02: PATH
  r.cluster.launcher = "slurm";
  auto state = cluster::slurm_job_state(r.cluster, r.job);
  if (!state) return std::nullopt;
  r.state = *state;
  return r;
}

}  // namespace troupe::control
