#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "troupe/cluster/process.hpp"

namespace troupe::cluster {
namespace {

TEST(process_info, self_exe_is_this_test) {
  auto exe = self_exe();
  ASSERT_TRUE(exe);
  EXPECT_NE(exe->find("cluster_test"), std::string::npos) << *exe;
}

TEST(process_info, stat_of_self) {
  auto st = read_process_stat(::getpid());
  ASSERT_TRUE(st);
  EXPECT_EQ(st->ppid, ::getppid());
  EXPECT_EQ(st->pgid, ::getpgrp());
  EXPECT_GT(st->start_time, 0u);
  EXPECT_TRUE(process_alive(::getpid()));
  EXPECT_TRUE(process_alive(::getpid(), st->start_time));
  EXPECT_FALSE(process_alive(::getpid(), st->start_time + 1));  // as if the pid were reused
  EXPECT_FALSE(process_alive(0));
  EXPECT_FALSE(process_alive(-1));
}

TEST(process_info, a_zombie_is_not_alive) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(0);
  // Not reaped yet: a zombie until waitpid.
  for (int i = 0; i < 500 && read_process_stat(pid) && read_process_stat(pid)->state != 'Z'; ++i)
    ::usleep(10000);
  auto st = read_process_stat(pid);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, 'Z');
  EXPECT_FALSE(process_alive(pid));
  ::waitpid(pid, nullptr, 0);
  EXPECT_FALSE(read_process_stat(pid));
}

TEST(process_info, signal_names) {
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
  EXPECT_EQ(signal_name(200), "signal 200");
}

}  // namespace
}  // namespace troupe::cluster
