// Verifying a record store before a job's workers use it. A corrupt page can make LMDB fail an
// assertion (abort) or read out of bounds, so every record is read in a child process: whatever
// happens there, the caller gets an error naming the file.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "troupe/job/data.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::job {

namespace {

// In the child: reads every record (checksums checked by scan); the problem, if any, into `fd`.
[[noreturn]] void verify_in_child(const std::string& dir, int fd) {
  int devnull = ::open("/dev/null", O_WRONLY);
  if (devnull >= 0) ::dup2(devnull, STDERR_FILENO);  // LMDB's assertion text is not for the user
  storage::env_options o;
  o.read_only = true;
  std::string problem;
  auto s = storage::record_store::open(dir, o);
  if (!s) {
    problem = s.err().to_string();
  } else {
    auto n = s->scan(0, s->count(), [](std::uint64_t, const storage::record&) { return true; });
    if (!n)
      problem = n.err().to_string();
    else if (*n != s->count())
      problem = "read " + std::to_string(*n) + " of " + std::to_string(s->count()) + " records";
  }
  if (!problem.empty()) (void)!::write(fd, problem.data(), problem.size());
  ::_exit(problem.empty() ? 0 : 1);
}

// What the stamp of a verified store records: its data file's size and modification time.
std::string data_file_identity(const std::string& dir) {
  struct stat st {};
  if (::stat((dir + "/data.mdb").c_str(), &st) != 0) return {};
  return std::to_string(st.st_size) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + "\n";
}

}  // namespace

expected<void> verify_store_once(const std::string& dir) {
  const std::string stamp = dir + "/verified";
  auto id = data_file_identity(dir);
  std::ifstream in(stamp);
  std::string seen((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!id.empty() && seen == id) return {};
  if (auto v = verify_store(dir); !v) return v;
  std::ofstream(stamp) << id;
  return {};
}

expected<void> verify_store(const std::string& dir) {
  const std::string file = dir + "/data.mdb";
  int p[2];
  if (::pipe(p) != 0) return make_unexpected(core_errc::io_error, file + ": pipe for its verification");
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return make_unexpected(core_errc::io_error, file + ": fork for its verification");
  }
  if (pid == 0) {
    ::close(p[0]);
    verify_in_child(dir, p[1]);
  }
  ::close(p[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = ::read(p[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(p[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return {};
  if (WIFSIGNALED(status))
    text = "reading it crashed LMDB (" + std::string(::strsignal(WTERMSIG(status))) + "): corrupt pages";
  return make_unexpected(storage::storage_errc::corrupt_record, file + ": " + text);
}

}  // namespace troupe::job
