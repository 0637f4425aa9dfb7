#include "local/spawn.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/process.hpp"

extern char** environ;

namespace troupe::cluster::local {

unique_fd& unique_fd::operator=(unique_fd&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

unique_fd::~unique_fd() {
  if (fd_ >= 0) ::close(fd_);
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void append_log_line(const std::string& path, const std::string& line) noexcept {
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string text = line + "\n";
  [[maybe_unused]] auto n = ::write(fd, text.data(), text.size());
  ::close(fd);
}

namespace {

unexpected fail(const node_spec& spec, const std::string& why) {
  return make_unexpected(cluster_errc::launch_failed, "node " + spec.id.to_string() + ": " + why);
}

expected<std::string> resolve_program(const node_spec& spec) {
  if (spec.program.empty()) return self_exe_to_run();
  if (spec.program.find('/') != std::string::npos) {
    if (::access(spec.program.c_str(), X_OK) != 0)
      return fail(spec, "program '" + spec.program + "': " + std::strerror(errno));
    return spec.program;
  }
  const char* path_env = ::getenv("PATH");
  std::string dirs = path_env ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (std::size_t start = 0; start <= dirs.size();) {
    auto end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    std::string dir = dirs.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + spec.program;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0)
      return candidate;
    start = end + 1;
  }
  return fail(spec, "program '" + spec.program + "' not found in PATH");
}

std::vector<std::string> build_env(const node_spec& spec) {
  std::map<std::string, std::string> vars;
  if (spec.inherit_env)
    for (char** e = environ; e && *e; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq != std::string::npos) vars[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  for (const auto& [k, v] : spec.env) vars[k] = v;
  std::vector<std::string> out;
  out.reserve(vars.size());
  for (const auto& [k, v] : vars) out.push_back(k + "=" + v);
  return out;
}

std::vector<char*> pointers(std::vector<std::string>& store) {
  std::vector<char*> p;
  p.reserve(store.size() + 1);
  for (auto& s : store) p.push_back(s.data());
  p.push_back(nullptr);
  return p;
}

}  // namespace

std::string header_line(const node_spec& spec, const std::string& path) {
  std::string line = "==== troupe launcher " + utc_now() + ": start " + spec.id.to_string() + ": " + path;
  for (std::size_t i = 1; i < spec.argv.size(); ++i) line += " " + spec.argv[i];
  return line;
}

expected<prepared_spawn> prepare_spawn(const node_spec& spec) {
  prepared_spawn p;
  auto path = resolve_program(spec);
  if (!path) return path.err();
  p.path = *path;
  p.argv_store = spec.argv;
  p.env_store = build_env(spec);
  p.argv = pointers(p.argv_store);
  p.envp = pointers(p.env_store);
  p.working_dir = spec.working_dir;
  p.stdin_fd = unique_fd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  if (!p.stdin_fd) return fail(spec, std::string("/dev/null: ") + std::strerror(errno));
  if (!spec.log_file.empty()) {
    p.log_fd = unique_fd(::open(spec.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644));
    if (!p.log_fd) return fail(spec, "log file '" + spec.log_file + "': " + std::strerror(errno));
    std::string header = header_line(spec, p.path) + "\n";
    if (::write(p.log_fd.get(), header.data(), header.size()) < 0)
      return fail(spec, "log file '" + spec.log_file + "': " + std::strerror(errno));
  }
  return p;
}

namespace {

// What the child reports through the status pipe when a step before exec() fails.
struct child_failure {
  int step;
  int err;
};
constexpr const char* step_names[] = {"setpgid", "parent died before start", "stdio", "chdir", "exec"};

[[noreturn]] void child_fail(int pipe_w, int step) {
  child_failure f{step, errno};
  [[maybe_unused]] auto n = ::write(pipe_w, &f, sizeof f);
  ::_exit(127);
}

// Runs in the child between fork and exec: async-signal-safe calls only.
[[noreturn]] void child_main(const prepared_spawn& p, int pipe_w, pid_t parent) {
  if (::setpgid(0, 0) != 0) child_fail(pipe_w, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) child_fail(pipe_w, 1);  // the parent died before the prctl
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig)
    if (sig != SIGKILL && sig != SIGSTOP) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  if (::dup2(p.stdin_fd.get(), 0) < 0) child_fail(pipe_w, 2);
  if (p.log_fd && (::dup2(p.log_fd.get(), 1) < 0 || ::dup2(p.log_fd.get(), 2) < 0)) child_fail(pipe_w, 2);
  // Close every other descriptor of the parent (sockets, LMDB files), keeping the status pipe;
  // it is close-on-exec and tells the parent that exec succeeded by closing.
  if (pipe_w > 3) ::close_range(3, static_cast<unsigned>(pipe_w) - 1, 0);
  ::close_range(static_cast<unsigned>(pipe_w) + 1, ~0U, 0);
  if (!p.working_dir.empty() && ::chdir(p.working_dir.c_str()) != 0) child_fail(pipe_w, 3);
  ::execve(p.path.c_str(), p.argv.data(), p.envp.data());
  child_fail(pipe_w, 4);
}

}  // namespace

expected<spawned> spawn_process(prepared_spawn& p, const node_spec& spec) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return fail(spec, std::string("pipe: ") + std::strerror(errno));
  unique_fd pipe_r(fds[0]), pipe_w(fds[1]);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) return fail(spec, std::string("fork: ") + std::strerror(errno));
  if (pid == 0) child_main(p, pipe_w.get(), parent);
  ::setpgid(pid, pid);  // also here, so the group exists before anyone signals it
  pipe_w = unique_fd();
  child_failure f{};
  ssize_t n;
  do {
    n = ::read(pipe_r.get(), &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  if (n > 0) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    std::string step = f.step >= 0 && f.step < 5 ? step_names[f.step] : "unknown step";
    return fail(spec, step + " '" + p.path + "': " + std::strerror(f.err));
  }
  spawned s;
  s.pid = pid;
  // Via syscall(): glibc 2.36's <sys/pidfd.h> lacks extern "C" for C++.
  s.pidfd = unique_fd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  return s;
}

}  // namespace troupe::cluster::local
