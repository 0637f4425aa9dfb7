// The Slurm launcher's pure parts: the sbatch argv it builds, and how it reads squeue and
// scontrol output. (tests/slurm runs the launcher against a real cluster.)
#include <gtest/gtest.h>

#include <algorithm>

#include "slurm/commands.hpp"

namespace troupe::cluster::slurm {
namespace {

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(slurm_commands, sbatch_argv_carries_resources_options_and_a_quoted_command) {
  node_spec spec;
  spec.id = node_id{"worker-3", 2};
  spec.argv = {"troupe", "node", "--name", "worker-3", "--odd", "it's here"};
  spec.env = {{"TROUPE_X", "a b"}};
  spec.log_file = "/jobs/j/worker-3.log";
  spec.working_dir = "/jobs/j";
  spec.need.cpus = 1.5;
  spec.need.memory_bytes = (512ull << 20) + 1;
  spec.need.gpus = 1;
  options so;
  so.partition = "low";
  so.account = "ml";
  so.time_limit = "1:00:00";
  so.sbatch_args = {"--exclusive"};
  auto a = sbatch_argv(spec, "/usr/bin/troupe", so);
  EXPECT_EQ(a[0], "sbatch");
  for (const char* s :
       {"--parsable", "--no-requeue", "--cpus-per-task=2", "--mem=513M", "--gres=gpu:1",
        "--output=/jobs/j/worker-3.log", "--chdir=/jobs/j", "--exclusive", "--signal=B:TERM@30"})
    EXPECT_TRUE(has(a, s)) << s;
  auto at = std::find(a.begin(), a.end(), "-J");
  ASSERT_NE(at, a.end());
  EXPECT_EQ(*(at + 1), "troupe:worker-3");
  EXPECT_EQ(*(std::find(a.begin(), a.end(), "-p") + 1), "low");
  EXPECT_EQ(*(std::find(a.begin(), a.end(), "-A") + 1), "ml");
  EXPECT_EQ(*(std::find(a.begin(), a.end(), "-t") + 1), "1:00:00");
  EXPECT_EQ(
      a.back(),
      "--wrap=exec env 'TROUPE_X=a b' '/usr/bin/troupe' 'node' '--name' 'worker-3' '--odd' 'it'\\''s here'");
}

TEST(slurm_commands, no_resources_no_partition_no_env) {
  node_spec spec;
  spec.id = node_id{"ps-0", 0};
  spec.argv = {"x", "y"};
  spec.inherit_env = false;
  auto a = sbatch_argv(spec, "/bin/p", options{});
  EXPECT_FALSE(has(a, "-p"));
  for (const auto& s : a) EXPECT_EQ(s.rfind("--mem", 0), std::string::npos) << s;
  EXPECT_TRUE(has(a, "--output=/dev/null"));
  EXPECT_EQ(a.back(), "--wrap=exec env -i '/bin/p' 'y'");
}

TEST(slurm_commands, preemptible_nodes_go_to_the_worker_partition_and_hosts_are_pinned) {
  node_spec spec;
  spec.id = node_id{"worker-1", 0};
  spec.argv = {"x"};
  options so;
  so.partition = "high";
  so.worker_partition = "low";
  auto control = sbatch_argv(spec, "/bin/p", so);
  auto p = std::find(control.begin(), control.end(), "-p");
  ASSERT_NE(p, control.end());
  EXPECT_EQ(*(p + 1), "high");
  EXPECT_FALSE(has(control, "-w"));
  spec.preemptible = true;
  spec.host = "h3";
  auto worker = sbatch_argv(spec, "/bin/p", so);
  p = std::find(worker.begin(), worker.end(), "-p");
  ASSERT_NE(p, worker.end());
  EXPECT_EQ(*(p + 1), "low");
  auto w = std::find(worker.begin(), worker.end(), "-w");
  ASSERT_NE(w, worker.end());
  EXPECT_EQ(*(w + 1), "h3");
  so.worker_partition.clear();  // no worker partition: workers share the control one
  auto shared = sbatch_argv(spec, "/bin/p", so);
  EXPECT_EQ(*(std::find(shared.begin(), shared.end(), "-p") + 1), "high");
}

TEST(slurm_commands, spare_workers_go_to_the_spare_partition) {
  node_spec spec;
  spec.id = node_id{"worker-7", 0};
  spec.argv = {"x"};
  spec.preemptible = true;
  spec.spare = true;
  options so;
  so.partition = "high";
  so.worker_partition = "low";
  auto partition = [&] {
    auto a = sbatch_argv(spec, "/bin/p", so);
    return *(std::find(a.begin(), a.end(), "-p") + 1);
  };
  EXPECT_EQ(partition(), "low");  // no spare partition: a spare worker is an ordinary one
  so.spare_partition = "spare";
  EXPECT_EQ(partition(), "spare");
  spec.spare = false;
  EXPECT_EQ(partition(), "low");
}

TEST(slurm_commands, scontrol_fields) {
  std::string node = "NodeName=h2 Arch=x86_64 CoresPerSocket=4 NodeAddr=10.78.0.12 NodeHostName=h2 Port=0\n";
  EXPECT_EQ(scontrol_field(node, "NodeAddr"), "10.78.0.12");
  EXPECT_EQ(scontrol_field(node, "NodeName"), "h2");
  EXPECT_EQ(scontrol_field(node, "Missing"), "");
}

TEST(slurm_commands, what_a_failed_command_said_is_its_last_stderr_lines_else_its_stdout) {
  tool_result r{1, "Node hx not found\nmore\n", "  \n"};
  EXPECT_EQ(said(r), "Node hx not found");
  r.err =
      "a\nsinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\n\nb \r\nCould not "
      "establish a configuration source\n";
  EXPECT_EQ(
      said(r),
      "sinfo: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host; b; Could not establish a "
      "configuration source");
  EXPECT_EQ(said(tool_result{1, "", ""}), "");
}

TEST(slurm_commands, squeue_lines) {
  auto m = parse_squeue("12|RUNNING\n13|PENDING\ngarbage\n|X\n14x|RUNNING\n15|CANCELLED by 0\n");
  EXPECT_EQ(m.size(), 3u);
  EXPECT_EQ(m[12].state, "RUNNING");
  EXPECT_EQ(m[13].state, "PENDING");
  EXPECT_EQ(m[15].state, "CANCELLED by 0");
  EXPECT_EQ(m[12].nodes, "");
  // With the node list (-o '%i|%T|%N'): empty while the job waits.
  auto n = parse_squeue("21|RUNNING|h2\n22|PENDING|\n23|COMPLETING|h3\n");
  ASSERT_EQ(n.size(), 3u);
  EXPECT_EQ(n[21].state, "RUNNING");
  EXPECT_EQ(n[21].nodes, "h2");
  EXPECT_EQ(n[22].state, "PENDING");
  EXPECT_EQ(n[22].nodes, "");
  EXPECT_EQ(n[23].nodes, "h3");
  // With the reason (-o '%i|%T|%N|%r'), which may hold commas.
  auto r = parse_squeue("31|PENDING||ReqNodeNotAvail, UnavailableNodes:h1\n32|RUNNING|h2|None\n");
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[31].nodes, "");
  EXPECT_EQ(r[31].reason, "ReqNodeNotAvail, UnavailableNodes:h1");
  EXPECT_EQ(r[32].nodes, "h2");
  EXPECT_EQ(r[32].reason, "None");
}

TEST(slurm_commands, scontrol_exit_codes_and_states) {
  auto s = parse_scontrol_job(
      "JobId=7 JobName=troupe:w JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 Foo=1\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "FAILED");
  EXPECT_EQ(s->code, 3);
  EXPECT_EQ(s->signal, 0);
  s = parse_scontrol_job("JobId=8 JobState=CANCELLED Reason=None ExitCode=0:15");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->signal, 15);
  EXPECT_EQ(s->to_string(), "killed by SIGTERM (CANCELLED)");
  EXPECT_FALSE(parse_scontrol_job("slurm_load_jobs error: Invalid job id specified"));
  s = parse_scontrol_job(
      "JobId=9 JobState=FAILED Reason=None ExitCode=0:15 PreemptTime=2026-11-23T12:00:00 X=1");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "PREEMPTED") << "the job ended on the preemption's SIGTERM";
  s = parse_scontrol_job("JobId=9 JobState=FAILED Reason=None ExitCode=1:0 PreemptTime=None");
  EXPECT_EQ(s->state, "FAILED");
  EXPECT_TRUE(terminal_state("PREEMPTED"));
  EXPECT_TRUE(terminal_state("CANCELLED by 0"));
  EXPECT_TRUE(terminal_state("NODE_FAIL"));
  EXPECT_FALSE(terminal_state("RUNNING"));
  EXPECT_FALSE(terminal_state("PENDING"));
  EXPECT_FALSE(terminal_state("COMPLETING"));
}

// A job whose node cannot open its log (the job directory not on a filesystem the node sees): what
// Slurm 22.05 says of it, taken from the test cluster.
TEST(slurm_commands, a_job_that_failed_to_launch_keeps_its_reason_and_host) {
  auto s = parse_scontrol_job(
      "JobId=567 JobName=troupe-u1:master JobState=FAILED Reason=JobLaunchFailure Dependency=(null) "
      "ExitCode=0:53 RunTime=00:00:00 NodeList=h1 BatchHost=h1 WorkDir=/tmp/u1 "
      "StdOut=/tmp/u1/logs/master.log\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "FAILED");
  EXPECT_EQ(s->trace.reason, "JobLaunchFailure");
  EXPECT_EQ(s->trace.host, "h1");
  EXPECT_EQ(s->signal, 53);
  s = parse_scontrol_job("JobId=8 JobState=CANCELLED Reason=None ExitCode=0:15");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->trace.reason, "") << "None is no reason";
  EXPECT_EQ(s->trace.host, "");
}

// sacct for a job slurmctld forgot: State|ExitCode|Reason|NodeList.
TEST(slurm_commands, sacct_lines) {
  auto s = parse_sacct_job("FAILED|0:53|None|h1\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "FAILED");
  EXPECT_EQ(s->code, 0);
  EXPECT_EQ(s->signal, 53);
  EXPECT_EQ(s->trace.reason, "");
  EXPECT_EQ(s->trace.host, "h1");
  s = parse_sacct_job("CANCELLED by 0|0:15|Resources|None assigned\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "CANCELLED");
  EXPECT_EQ(s->trace.reason, "Resources");
  EXPECT_EQ(s->trace.host, "");
  EXPECT_FALSE(parse_sacct_job(""));
  EXPECT_FALSE(parse_sacct_job("garbage\n"));
}

TEST(slurm_commands, a_missing_tool_is_named) {
  auto r = run_tool({"sbatch", "--version"}, "/nonexistent-dir", std::chrono::seconds(5));
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("/nonexistent-dir/sbatch"), std::string::npos) << r.err().to_string();
  auto t = run_tool({"sh", "-c", "echo out; echo err >&2; exit 4"}, "", std::chrono::seconds(5));
  ASSERT_TRUE(t) << t.err().to_string();
  EXPECT_EQ(t->code, 4);
  EXPECT_EQ(t->out, "out\n");
  EXPECT_EQ(t->err, "err\n");
  auto slow = run_tool({"sleep", "5"}, "", std::chrono::milliseconds(100));
  ASSERT_FALSE(slow);
  EXPECT_NE(slow.err().to_string().find("did not answer"), std::string::npos);
  // The dashboard's bound on output: a command that prints without end is killed, not read whole.
  auto chatty = run_tool({"yes"}, "", std::chrono::seconds(20), 1 << 16);
  ASSERT_FALSE(chatty);
  EXPECT_NE(chatty.err().to_string().find("printed more than 65536 bytes"), std::string::npos)
      << chatty.err().to_string();
}

}  // namespace
}  // namespace troupe::cluster::slurm
