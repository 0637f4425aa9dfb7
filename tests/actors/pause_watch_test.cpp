// pause_watch on real pauses: a child process that its parent SIGSTOPs and SIGCONTs.
#include "master/pause_watch.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

TEST(pause_watch, a_running_process_was_not_paused) {
  pause_watch w(100ms);
  EXPECT_FALSE(w.paused_within(10s));
}

// The child watches with a 250 ms threshold; the parent stops it for 800 ms once it is watching.
// Asked right after it woke, and still 1 s later, it knows; with a window that is over, not.
TEST(pause_watch, a_stopped_process_knows_it_was_paused) {
  int ready[2], go[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(go), 0);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    pause_watch w(250ms);
    char c = 'r';
    if (::write(ready[1], &c, 1) != 1) ::_exit(10);
    if (::read(go[0], &c, 1) != 1) ::_exit(11);  // the parent writes once it sent SIGCONT
    if (!w.paused_within(2s)) ::_exit(1);
    std::this_thread::sleep_for(1s);
    if (!w.paused_within(5s)) ::_exit(2);
    if (w.paused_within(100ms)) ::_exit(3);
    ::_exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(::kill(pid, SIGSTOP), 0);
  std::this_thread::sleep_for(800ms);  // the pause itself
  ASSERT_EQ(::kill(pid, SIGCONT), 0);
  ASSERT_EQ(::write(go[1], &c, 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: not paused right after waking, 2: forgot within the window, "
                                       "3: still paused after the window";
}

}  // namespace
}  // namespace troupe::actors
