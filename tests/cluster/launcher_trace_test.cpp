// What an exit report says of a node's run besides how it ended (exit_trace): what its process
// wrote to its log since its launch, without the launcher's own lines; a log that does not exist
// where the launcher looks; Slurm's reason and host, from scontrol or, for a job slurmctld has
// forgotten, sacct. The Slurm launcher runs against scripts that answer as Slurm 22.05 does for a
// job whose node does not see the job directory (tests/slurm runs the real thing).
#include <gtest/gtest.h>

#include <fstream>
#include <thread>

#include "launcher_fixtures.hpp"
#include "troupe/cluster/slurm/launcher.hpp"

namespace troupe::cluster::testing {
namespace {

using namespace std::chrono_literals;

TEST(launcher_trace, a_local_report_carries_what_the_node_wrote_since_its_launch) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  const auto path = dir / "node.log";
  std::ofstream(path) << "an earlier incarnation's line\n";
  auto h = l->launch(shell("n1", "echo 'ssh: Could not resolve hostname h1' >&2; exit 7", path));
  ASSERT_TRUE(h) << h.err().to_string();
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->code, 7);
  EXPECT_FALSE(st->trace.log_missing);
  EXPECT_EQ(st->trace.output, "ssh: Could not resolve hostname h1")
      << "neither the earlier run nor the launcher's header";
  EXPECT_EQ(st->trace.log_bytes, st->trace.output.size() + 1);

  auto quiet = l->launch(shell("n2", "exit 3", dir / "quiet.log"));
  ASSERT_TRUE(quiet);
  st = log.wait_for(*quiet, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->trace.log_bytes, 0u);
  EXPECT_EQ(st->trace.output, "");
  EXPECT_FALSE(st->trace.log_missing);
}

TEST(launcher_trace, a_local_report_keeps_the_end_of_a_long_output_from_a_line_start) {
  temp_dir dir;
  exit_log log;
  auto l = make(log);
  auto h = l->launch(
      shell("n1", "i=0; while [ $i -lt 500 ]; do echo line $i; i=$((i+1)); done; exit 1", dir / "node.log"));
  ASSERT_TRUE(h);
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_LE(st->trace.output.size(), exit_trace::output_limit);
  EXPECT_EQ(st->trace.output.rfind("line 499"), st->trace.output.size() - 8) << st->trace.output;
  EXPECT_EQ(st->trace.output.rfind("line ", 0), 0u) << "begins at a whole line: " << st->trace.output;
  EXPECT_GT(st->trace.log_bytes, exit_trace::output_limit);
}

TEST(launcher_trace, a_local_node_without_a_log_has_no_trace) {
  exit_log log;
  auto l = make(log);
  auto h = l->launch(shell("n1", "exit 2"));
  ASSERT_TRUE(h);
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->trace, exit_trace{});
}

// A Slurm launcher over the scripts in `bin`, polling every 20 ms.
std::unique_ptr<slurm::launcher> slurm_over(const temp_dir& bin, exit_log& log) {
  launcher_options lo;
  lo.on_exit = log.callback();
  slurm::options so;
  so.bin_dir = bin.str();
  so.poll_interval = 20ms;
  auto l = slurm::launcher::create(lo, so);
  EXPECT_TRUE(l) << l.err().to_string();
  return l ? std::move(*l) : nullptr;
}

node_spec master_spec(const std::string& log_file) {
  node_spec spec;
  spec.id = {"master", 0};
  spec.argv = {"troupe", "node"};
  spec.log_file = log_file;
  return spec;
}

TEST(launcher_trace, a_slurm_job_that_never_launched_reports_its_reason_host_and_missing_log) {
  temp_dir bin, jobs;
  write_tool(bin.str(), "sinfo", "echo 0/4/0/4");
  write_tool(bin.str(), "sbatch", "echo 567");
  write_tool(bin.str(), "squeue", "echo '567|FAILED'");
  write_tool(
      bin.str(), "scontrol",
      "echo 'JobId=567 JobState=FAILED Reason=JobLaunchFailure ExitCode=0:53 NodeList=h1 BatchHost=h1'");
  exit_log log;
  auto l = slurm_over(bin, log);
  ASSERT_TRUE(l);
  auto h = l->launch(master_spec(jobs / "logs/master.log"));  // Slurm would write it on h1
  ASSERT_TRUE(h) << h.err().to_string();
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, "FAILED");
  EXPECT_EQ(st->signal, 53);
  EXPECT_EQ(st->trace.reason, "JobLaunchFailure");
  EXPECT_EQ(st->trace.host, "h1");
  EXPECT_TRUE(st->trace.log_missing);
}

// A job waiting in the queue says why, as squeue's reason (a drained node, the control host's CPUs
// taken by another job's nodes: "starting or queued" alone told nothing); once it runs, nothing.
TEST(launcher_trace, a_slurm_job_waiting_in_the_queue_says_why) {
  temp_dir bin, jobs;
  write_tool(bin.str(), "sinfo", "echo 0/4/0/4");
  write_tool(bin.str(), "sbatch", "echo 570");
  const std::string state = bin.str() + "/state";
  write_tool(bin.str(), "scancel", "echo '570|CANCELLED||None' > " + state);
  std::ofstream(state) << "570|PENDING||ReqNodeNotAvail, UnavailableNodes:h3\n";
  write_tool(bin.str(), "squeue", "cat " + state);
  exit_log log;
  auto l = slurm_over(bin, log);
  ASSERT_TRUE(l);
  auto h = l->launch(master_spec(jobs / "logs/master.log"));
  ASSERT_TRUE(h) << h.err().to_string();
  // "PENDING" alone until the first poll has the reason.
  for (int i = 0; i < 250 && l->waiting_why(*h).find('(') == std::string::npos; ++i)
    std::this_thread::sleep_for(20ms);
  EXPECT_EQ(l->waiting_why(*h), "PENDING (ReqNodeNotAvail, UnavailableNodes:h3)");
  std::ofstream(state) << "570|RUNNING|h3|None\n";
  for (int i = 0; i < 250 && !l->waiting_why(*h).empty(); ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(l->waiting_why(*h), "") << "it runs";
  EXPECT_EQ(l->host_of(*h), "h3");
}

TEST(launcher_trace, a_slurm_job_whose_shell_failed_reports_its_output_and_accounting_fills_in) {
  temp_dir bin, jobs;
  write_tool(bin.str(), "sinfo", "echo 0/4/0/4");
  // sbatch "runs" the job: the batch shell cannot find the binary and says so in the log.
  write_tool(bin.str(), "sbatch",
             "for a; do case $a in --output=*) echo '/bin/sh: 1: exec: /opt/troupe: not found' >> "
             "\"${a#--output=}\";; esac; done; echo 568");
  write_tool(bin.str(), "squeue", "echo '568|FAILED'");
  // slurmctld has forgotten the job already: accounting tells.
  write_tool(bin.str(), "scontrol", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1");
  write_tool(bin.str(), "sacct", "echo 'FAILED|127:0|None|h2'");
  exit_log log;
  auto l = slurm_over(bin, log);
  ASSERT_TRUE(l);
  const auto path = jobs / "worker-0.log";
  auto h = l->launch(master_spec(path));
  ASSERT_TRUE(h) << h.err().to_string();
  auto st = log.wait_for(*h, 10s);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->state, "FAILED");
  EXPECT_EQ(st->code, 127);
  EXPECT_EQ(st->trace.reason, "");
  EXPECT_EQ(st->trace.host, "h2");
  EXPECT_FALSE(st->trace.log_missing);
  EXPECT_EQ(st->trace.output, "/bin/sh: 1: exec: /opt/troupe: not found");
}

}  // namespace
}  // namespace troupe::cluster::testing
