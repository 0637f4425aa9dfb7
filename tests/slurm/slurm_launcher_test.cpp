// The Slurm launcher against a real cluster (scripts/slurm-cluster.sh: slurmctld + 4 slurmd in
// namespaces): exit reports from Slurm's state, signals, pending jobs, preemption by a
// high-priority job, and no orphans after the owner dies. Skips, printing why, without root.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "run_command.hpp"
#include "troupe/cluster/slurm/launcher.hpp"

namespace troupe::cluster::slurm {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string sh(const std::string& cmd) {
  return test_util::run_command(cmd).out;
}

std::string slurm_script() {
  return std::string(TROUPE_SOURCE_DIR) + "/scripts/slurm-cluster.sh";
}

class slurm_launcher : public ::testing::Test {
 protected:
  static inline bool up_ = false;
  static inline std::string why_;
  static void SetUpTestSuite() {
    if (::geteuid() != 0) {
      why_ = "the Slurm test cluster needs root (namespaces, daemons)";
      return;
    }
    int rc = std::system(
        ("TROUPE_SLURM_DBD=0 bash " + slurm_script() + " up > /var/tmp/troupe-slurm-up.log 2>&1").c_str());
    if (rc != 0) {
      why_ = "scripts/slurm-cluster.sh up failed: " + sh("cat /var/tmp/troupe-slurm-up.log");
      return;
    }
    up_ = true;
  }
  static void TearDownTestSuite() {
    if (up_) (void)std::system(("bash " + slurm_script() + " down > /dev/null 2>&1").c_str());
  }
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << why_;
    ASSERT_TRUE(up_) << why_;
    dir_ = fs::path("/var/tmp") /
           ("troupe-slurm-launcher-" + std::to_string(::getpid()));  // hosts share /var/tmp, not /tmp
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::unique_ptr<launcher> make(options so = {}) {
    so.poll_interval = 100ms;
    auto l = launcher::create({}, so);
    EXPECT_TRUE(l) << l.err().to_string();
    return l ? std::move(*l) : nullptr;
  }
  node_spec shell(const std::string& name, const std::string& script, double cpus = 1) {
    node_spec s;
    s.id = node_id{name, 0};
    s.program = "/bin/sh";
    s.argv = {"sh", "-c", script};
    s.log_file = (dir_ / (name + ".log")).string();
    s.need.cpus = cpus;
    return s;
  }
  fs::path dir_;
};

TEST_F(slurm_launcher, reports_the_exit_code_and_state_from_slurm) {
  auto l = make();
  ASSERT_TRUE(l);
  auto h = l->launch(shell("worker-0", "echo on $(hostname); exit 3"));
  ASSERT_TRUE(h) << h.err().to_string();
  EXPECT_GT(h->pid, 0) << "the Slurm job id";
  auto st = l->wait(*h, 60s);
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_EQ(st->code, 3);
  EXPECT_EQ(st->state, "FAILED");
  std::ifstream log(dir_ / "worker-0.log");
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line.rfind("on h", 0), 0u) << "ran on a namespace host: " << line;
  EXPECT_TRUE(l->running().empty());
  auto again = l->signal(*h, SIGTERM);
  EXPECT_FALSE(again) << "a reported node has a dead handle";
  EXPECT_FALSE(l->fence(*h));
}

TEST_F(slurm_launcher, a_signal_reaches_the_node_itself) {
  auto l = make();
  ASSERT_TRUE(l);
  auto h = l->launch(
      shell("worker-1",
            "trap 'echo got TERM; exit 7' TERM; echo ready on $(hostname).; while :; do sleep 0.1; done"));
  ASSERT_TRUE(h) << h.err().to_string();
  for (int i = 0; i < 600 && l->state(*h) != "RUNNING"; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(l->state(*h), "RUNNING");
  // Wait for the trap to be installed (the script says so) before signalling.
  for (int i = 0; i < 600 && sh("cat " + (dir_ / "worker-1.log").string()).find("ready") == std::string::npos;
       ++i)
    std::this_thread::sleep_for(100ms);
  // host_of: the node squeue lists the running job on, the one the script runs on.
  const auto log = sh("cat " + (dir_ / "worker-1.log").string());
  const auto at = log.find("ready on ") + 9;
  EXPECT_EQ(l->host_of(*h), log.substr(at, log.find('.', at) - at)) << log;
  ASSERT_TRUE(l->signal(*h, SIGTERM));
  auto st = l->wait(*h, 60s);
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_EQ(st->code, 7) << st->to_string();
  EXPECT_NE(sh("cat " + (dir_ / "worker-1.log").string()).find("got TERM"), std::string::npos);
}

TEST_F(slurm_launcher, a_stopped_node_is_fenced) {
  auto l = make();
  ASSERT_TRUE(l);
  auto h = l->launch(shell("worker-2", "echo ready $$; kill -STOP $$; echo never"));
  ASSERT_TRUE(h) << h.err().to_string();
  for (int i = 0; i < 600 && sh("cat " + (dir_ / "worker-2.log").string()).find("ready") == std::string::npos;
       ++i)
    std::this_thread::sleep_for(100ms);
  // Fenced once it has stopped (the hosts share this PID namespace): fenced between its "ready" and
  // its stop (a loaded CI machine), the job read as not started yet, was cancelled and ran on.
  const auto said = sh("cat " + (dir_ / "worker-2.log").string());
  const int pid = std::atoi(said.substr(said.find("ready") + 6).c_str());
  ASSERT_GT(pid, 0) << said;
  auto state = [&] {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');
    return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
  };
  for (int i = 0; i < 100 && state() != 'T'; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(state(), 'T') << "pid " << pid << " never stopped";
  ASSERT_TRUE(l->fence(*h));
  auto st = l->wait(*h, 60s);
  ASSERT_TRUE(st) << st.err().to_string();
  // Killed, not cancelled: a cancel SIGCONTs and SIGTERMs it first (a fenced node woke up and ran
  // on); a SIGKILL ends it stopped. (SIGUSR2 then SIGCONT, two requests, could come CONT first.)
  EXPECT_EQ(st->signal, SIGKILL) << st->to_string();
  EXPECT_TRUE(l->running().empty());
  EXPECT_EQ(sh("cat " + (dir_ / "worker-2.log").string()).find("never"), std::string::npos);
}

TEST_F(slurm_launcher, jobs_that_do_not_fit_wait_pending_and_kill_all_cancels_them) {
  auto l = make();
  ASSERT_TRUE(l);
  ASSERT_GT(l->capacity().cpus, 0);
  int n = static_cast<int>(l->capacity().cpus / 4) + 2;  // 4-CPU nodes: two more than fit
  std::vector<node_handle> hs;
  for (int i = 0; i < n; ++i) {
    auto h = l->launch(shell("worker-" + std::to_string(i), "sleep 300", 4));
    ASSERT_TRUE(h) << h.err().to_string();
    hs.push_back(*h);
  }
  int pending = 0;
  for (int i = 0; i < 300; ++i) {
    int running = 0;
    pending = 0;
    for (auto& h : hs) {
      running += l->state(h) == "RUNNING";
      pending += l->state(h) == "PENDING";
    }
    if (running == n - 2 && pending == 2) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_EQ(pending, 2) << "two nodes wait in the queue";
  // Each says why, as squeue does (the runner's progress line and its warning quote it).
  for (auto& h : hs) {
    if (l->state(h) == "PENDING")
      EXPECT_EQ(l->waiting_why(h).rfind("PENDING (", 0), 0u) << l->waiting_why(h);
    else
      EXPECT_EQ(l->waiting_why(h), "") << l->state(h);
  }
  l->kill_all();
  EXPECT_TRUE(l->running().empty());
  for (auto& h : hs) {
    auto st = l->poll(h);
    ASSERT_TRUE(st && *st);
    EXPECT_EQ((*st)->state.rfind("CANCELLED", 0), 0u) << (*st)->to_string();
  }
  EXPECT_EQ(sh("squeue -h -o %j | grep -c '^troupe:' || true"), "0\n");
}

TEST_F(slurm_launcher, a_high_priority_job_preempts_a_node) {
  options so;
  so.partition = "low";
  auto l = make(so);
  ASSERT_TRUE(l);
  auto h = l->launch(shell("worker-9", "sleep 300", 1));
  ASSERT_TRUE(h) << h.err().to_string();
  for (int i = 0; i < 600 && l->state(*h) != "RUNNING"; ++i) std::this_thread::sleep_for(100ms);
  ASSERT_EQ(l->state(*h), "RUNNING");
  int total = static_cast<int>(l->capacity().cpus);
  sh("sbatch -p high -n " + std::to_string(total) + " -o /dev/null --wrap 'sleep 2'");
  auto st = l->wait(*h, 120s);
  ASSERT_TRUE(st) << st.err().to_string();
  EXPECT_EQ(st->state, "PREEMPTED") << st->to_string();
}

TEST_F(slurm_launcher, jobs_of_an_owner_that_died_are_cancelled_from_the_jobs_file) {
  std::string jobs = (dir_ / "slurm_jobs").string();
  pid_t child = ::fork();
  if (child == 0) {
    options so;
    so.jobs_file = jobs;
    auto l = launcher::create({}, so);
    if (!l) _exit(2);
    for (const char* name : {"worker-0", "worker-1"}) {
      node_spec s;
      s.id = node_id{name, 0};
      s.program = "/bin/sleep";
      s.argv = {"sleep", "300"};
      if (!(*l)->launch(s)) _exit(3);
    }
    _exit(0);  // no destructor: the owner "dies" with its jobs submitted
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_EQ(sh("squeue -h -o %j | grep -c '^troupe:' || true"), "2\n");
  auto n = launcher::cancel_recorded(jobs, options{});
  ASSERT_TRUE(n) << n.err().to_string();
  EXPECT_EQ(*n, 2);
  for (int i = 0; i < 100 && sh("squeue -h -t PD,R -o %j | grep -c '^troupe:' || true") != "0\n"; ++i)
    std::this_thread::sleep_for(100ms);
  EXPECT_EQ(sh("squeue -h -t PD,R -o %j | grep -c '^troupe:' || true"), "0\n");
}

TEST_F(slurm_launcher, an_unknown_partition_is_named) {
  options so;
  so.partition = "no-such-partition";
  auto l = launcher::create({}, so);
  ASSERT_FALSE(l);
  EXPECT_NE(l.err().to_string().find("no-such-partition"), std::string::npos) << l.err().to_string();
}

}  // namespace
}  // namespace troupe::cluster::slurm
