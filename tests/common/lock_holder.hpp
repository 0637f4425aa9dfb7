// A child process holding a whole-file write lock (fcntl) on `path`, as a job's runner holds its
// runner.lock: a lock this process held would not show to itself (F_GETLK reports other processes'
// locks only). The child waits until killed; a child that could not take the lock exits 1.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>

namespace troupe::test_util {

inline pid_t hold_lock_in_child(const std::string& path) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  struct flock l {};
  l.l_type = F_WRLCK;
  l.l_whence = SEEK_SET;
  if (fd < 0 || ::fcntl(fd, F_SETLK, &l) != 0) ::_exit(1);
  ::pause();
  ::_exit(0);
}

// Kills and reaps such a child.
inline void release_lock_child(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

}  // namespace troupe::test_util
