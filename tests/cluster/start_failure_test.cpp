// A node that ended before it joined the job: which ends count towards giving up on it
// (start_failure) and the line that says what happened and what to check (describe).
#include <gtest/gtest.h>
#include <signal.h>

#include "troupe/cluster/cut_off_hosts.hpp"
#include "troupe/cluster/start_failure.hpp"

namespace troupe::cluster::testing {
namespace {

exit_status exited(int code, std::string output = "") {
  exit_status s;
  s.code = code;
  s.trace.output = std::move(output);
  s.trace.log_bytes = s.trace.output.size();
  return s;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(start_failure, only_an_end_with_nothing_of_troupes_in_its_output_counts) {
  const node_id id{"worker-0", 3};
  EXPECT_TRUE(start_failure(exited(255, "ssh: Could not resolve hostname h1"), id, false));
  EXPECT_TRUE(start_failure(exited(7), id, false));
  EXPECT_TRUE(
      start_failure(exited(2, "[2026-11-26 09:00:00.000] [error] core: job.toml: not found"), id, false))
      << "a failure before the node logged under its name";
  EXPECT_FALSE(start_failure(exited(1, "2026-11-26 09:00:00.000 E [worker-0#3] boom"), id, false))
      << "troupe ran as this node";
  EXPECT_TRUE(start_failure(exited(1, "2026-11-26 09:00:00.000 E [worker-0#2] boom"), id, false))
      << "an earlier incarnation's line is not this one's";
  EXPECT_FALSE(start_failure(exited(7), id, true)) << "fenced";
  exit_status killed;
  killed.signal = SIGKILL;
  EXPECT_FALSE(start_failure(killed, id, false)) << "killed from outside";
  exit_status unknown;
  unknown.code = -1;
  EXPECT_FALSE(start_failure(unknown, id, false));
  exit_status slurm;
  slurm.signal = 53;
  slurm.state = "FAILED";
  slurm.trace.log_missing = true;
  EXPECT_TRUE(start_failure(slurm, id, false));
  slurm.state = "PREEMPTED";
  EXPECT_FALSE(start_failure(slurm, id, false));
  slurm.state = "CANCELLED by 0";
  EXPECT_FALSE(start_failure(slurm, id, false));
  // troupe ran as the node and could not join (its own exit code): it counts (such a node was
  // relaunched every 30 s for ever), unless fenced or killed.
  const auto unjoined = exited(exit_join_failed,
                               "2026-12-01 05:00:00.000 E [worker-0#3] worker-0#3: cannot reach "
                               "the master at --join 127.0.0.1:4000 within 30 s: refused\n");
  EXPECT_TRUE(start_failure(unjoined, id, false));
  EXPECT_FALSE(start_failure(unjoined, id, true)) << "fenced";
}

TEST(start_failure, a_node_that_could_not_join_quotes_its_error_and_says_what_to_check) {
  start_failure_report r;
  r.id = {"worker-2", 5};
  r.status = exited(exit_join_failed,
                    "2026-12-01 05:00:00.000 I [worker-2#5] starting\n"
                    "2026-12-01 05:00:30.000 E [worker-2#5] worker-2#5: cannot reach the master at --join "
                    "127.0.0.1:45439 within 30 s: connect_failed: Connection refused\n");
  r.backend = "local";
  r.host = "h3";
  r.log_path = "jobs/x/logs/worker-2.log";
  r.program = "/usr/bin/troupe";
  r.times = 3;
  auto text = describe(r);
  EXPECT_TRUE(has(text,
                  "worker-2 never joined the master: its command on host h3 exited with code 69, 3 times in "
                  "a row; its last error (jobs/x/logs/worker-2.log): worker-2#5: cannot "
                  "reach the master at --join 127.0.0.1:45439 within 30 s"))
      << text;
  EXPECT_TRUE(has(text, "check: does the node's host reach the master's address ([cluster] advertise"))
      << text;
  EXPECT_FALSE(has(text, "filesystem")) << "troupe ran there: " << text;
}

// The error a node died of is the cause, not the supervisor's giving up on it (a job whose dataset
// cache the hosts could not see failed with "child 'dispenser' needed more than 5 restarts").
TEST(last_logged_error, names_the_cause_before_the_supervisors_giving_up) {
  auto s =
      exited(1,
             "2026-11-30 07:00:00.000 I [master#0] up\n"
             "2026-11-30 07:00:00.100 E [master#0] dispenser: /c/train: not a record store (no data.mdb)\n"
             "2026-11-30 07:00:00.200 E [master#0] supervisor 'master': child 'dispenser' needed more than 5 "
             "restarts within 60000 ms; last exit: error; giving up\n"
             "2026-11-30 07:00:00.300 C [master#0] master#0: root supervisor exited: intensity\n"
             "2026-11-30 07:00:00.400 I [master#0] bye\n");
  EXPECT_EQ(last_logged_error(s), "dispenser: /c/train: not a record store (no data.mdb)");
  s = exited(1, "2026-11-30 07:00:00.200 E [master#0] supervisor 'master': child 'd' needed more than 5 x\n");
  EXPECT_EQ(last_logged_error(s), "supervisor 'master': child 'd' needed more than 5 x")
      << "with no other error, the giving up is what there is";
  EXPECT_EQ(last_logged_error(exited(1, "2026-11-30 07:00:00.200 I [master#0] fine\n")), "");
  // An exception an actor threw, as CAF reports it on stderr: the cause.
  s = exited(1,
             "*** unhandled exception: [id: 12, name: user.scheduled-actor, exception typeid: "
             "St13runtime_error]: ps-0: checkpoint 4 does not fit this job's model\n"
             "2026-11-30 07:00:00.200 E [ps-0#3] supervisor 'ps': child 'shard' needed more than 5 x\n");
  EXPECT_EQ(last_logged_error(s), "ps-0: checkpoint 4 does not fit this job's model");
}

TEST(start_failure, a_slurm_job_that_never_launched_names_state_reason_log_and_what_to_check) {
  start_failure_report r;
  r.id = {"master", 2};
  r.status.signal = 53;
  r.status.state = "FAILED";
  r.status.trace.reason = "JobLaunchFailure";
  r.status.trace.log_missing = true;
  r.backend = "slurm";
  r.slurm_job = 570;
  r.host = "h1";
  r.log_path = "/tmp/jobs/u1/logs/master.log";
  r.program = "/opt/troupe/bin/troupe";
  r.times = 3;
  auto text = describe(r);
  EXPECT_EQ(text.rfind("master never came up: ", 0), 0u) << text;
  for (const char* part : {"Slurm job ended FAILED (reason JobLaunchFailure, ExitCode 0:53) on h1",
                           "3 times in a row", "Slurm job 570", "before troupe started in it",
                           "its log /tmp/jobs/u1/logs/master.log was never written here",
                           "is the job directory on a filesystem the nodes share?",
                           "is the troupe binary at /opt/troupe/bin/troupe on the node?"})
    EXPECT_TRUE(has(text, part)) << part << " not in: " << text;
}

TEST(start_failure, a_host_command_that_failed_names_its_exit_and_its_last_output) {
  start_failure_report r;
  r.id = {"worker-0", 2};
  r.status = exited(255, "one\ntwo\n\nthree\nssh: Could not resolve hostname h1: Name or service not known");
  r.backend = "local";
  r.host = "h1";
  r.log_path = "jobs/x/logs/worker-0.log";
  r.program = "/usr/bin/troupe";
  r.times = 3;
  auto text = describe(r);
  EXPECT_EQ(
      text.rfind("worker-0 never joined the master: its command on host h1 exited with code 255, 3 times "
                 "in a row; its output (jobs/x/logs/worker-0.log) ends: two | three | ssh: Could not "
                 "resolve hostname h1: Name or service not known; check: does [cluster] host_command "
                 "reach host h1? is the job directory on a filesystem the nodes share? is the troupe "
                 "binary at /usr/bin/troupe on the node?",
                 0),
      0u)
      << text;
  r.status = exited(7);
  text = describe(r);
  EXPECT_TRUE(has(text,
                  "exited with code 7, 3 times in a row, before troupe started in it: it wrote nothing "
                  "to its log jobs/x/logs/worker-0.log"))
      << text;
}

TEST(start_failure, a_node_on_this_machine_gets_no_hint_about_other_hosts) {
  start_failure_report r;
  r.id = {"ps-1", 2};
  r.status = exited(2, std::string(600, 'x'));
  r.backend = "local";
  r.log_path = "logs/ps-1.log";
  r.program = "/usr/bin/troupe";
  r.times = 1;
  auto text = describe(r);
  EXPECT_TRUE(has(text, "ps-1 never joined the master: its process exited with code 2, 1 time in a row"))
      << text;
  EXPECT_TRUE(has(text, "ends: ...xxx")) << "a long line is cut to its end: " << text;
  EXPECT_LT(text.size(), 600u);
  EXPECT_FALSE(has(text, "filesystem")) << text;
}

// The hosts the runner's and serve's next launches avoid: cut for the period from the last cut, said
// once (cut is true only for a host not cut already).
TEST(cut_off_hosts, a_host_is_avoided_for_the_period_from_its_last_cut) {
  manual_clock clk;
  cut_off_hosts cut;
  EXPECT_TRUE(cut.at(clk.now()).empty());
  EXPECT_TRUE(cut.cut("h1", clk.now()));
  clk.advance(std::chrono::seconds(60));
  EXPECT_FALSE(cut.cut("h1", clk.now())) << "cut again while cut: not said twice";
  EXPECT_TRUE(cut.cut("h2", clk.now()));
  EXPECT_EQ(cut.at(clk.now()), (std::vector<std::string>{"h1", "h2"}));
  clk.advance(cut_off_hosts::period - std::chrono::seconds(1));
  EXPECT_EQ(cut.at(clk.now()), (std::vector<std::string>{"h1", "h2"}))
      << "the second cut restarted h1's period";
  clk.advance(std::chrono::seconds(1));
  EXPECT_TRUE(cut.at(clk.now()).empty());
  EXPECT_TRUE(cut.cut("h1", clk.now())) << "a host cut again after its period is said again";
  EXPECT_EQ(cut_off_hosts::period_seconds(), 120);
}

}  // namespace
}  // namespace troupe::cluster::testing
