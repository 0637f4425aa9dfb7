// The Slurm launcher's fence, signals and launch against scripts standing in for Slurm's commands
// (tests/slurm fences a real SIGSTOPped job): fence() returns at once and the watcher kills the node
// (scancel --batch --signal=9), never cancels it while it runs (a cancel is SIGCONT then SIGTERM: a
// stopped node woke and left cleanly). A refused signal is tried again at the next look; only a job
// Slurm says is PENDING is cancelled; one Slurm says is over is left alone. While the controller
// does not answer, fences and signals wait for it without holding their caller (the runner's loop),
// and a launch fails at once.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "launcher_fixtures.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/slurm/launcher.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::cluster::testing {
namespace {

using namespace std::chrono_literals;

constexpr auto look = 10min;  // the watcher's poll_interval, on the manual clock

// Slurm's commands as scripts in a temporary directory: sbatch answers job 4242; squeue lists the
// job as `listed` and says it is `asked` when asked for its state alone, or fails as a controller
// that does not answer while the file `down` exists; scancel writes each call's arguments to
// calls.log, and refuses its first `refusals` signals with `refusal` (a plain cancel succeeds).
struct fake_slurm {
  temp_dir bin;
  manual_clock clk;
  std::unique_ptr<slurm::launcher> l;

  fake_slurm(const std::string& listed, const std::string& asked, int refusals, const std::string& refusal) {
    const std::string dir = bin.str();
    write_tool(
        dir, "sinfo",
        "echo \"$*\" >> " + dir + "/sinfo.log\ncase \"$*\" in *'-n '*) echo h1 ;; *) echo 0/4/0/4 ;; esac");
    write_tool(dir, "sbatch", "echo \"$*\" >> " + dir + "/sbatch.log\necho 4242");
    write_tool(dir, "squeue",
               "if [ -e " + dir +
                   "/down ]; then echo 'squeue: error: Unable to contact slurm controller (connect "
                   "failure)' >&2; exit 1; fi\n"
                   "case \"$*\" in *'%i|%T'*) echo '4242|" +
                   listed + "|h1|None' ;; *) echo " + asked + " ;; esac");
    write_tool(dir, "scancel",
               "echo \"$*\" >> " + dir +
                   "/calls.log\n"
                   "case \"$*\" in *--signal*) ;; *) exit 0 ;; esac\n"
                   "n=$(cat " +
                   dir +
                   "/refused 2>/dev/null || echo 0)\n"
                   "if [ \"$n\" -lt " +
                   std::to_string(refusals) + " ]; then echo $((n + 1)) > " + dir + "/refused; echo '" +
                   refusal +
                   "' >&2; exit 1; fi\n"
                   "exit 0");
  }

  void set_down(bool down) {
    const auto flag = bin.str() + "/down";
    if (down)
      std::ofstream{flag};
    else
      std::filesystem::remove(flag);
  }

  std::unique_ptr<slurm::launcher> launcher() {
    launcher_options lo;
    lo.clock = clk;
    slurm::options so;
    so.bin_dir = bin.str();
    so.poll_interval = look;  // the watcher looks when the clock moves by this, or a fence asks
    so.command_timeout = 1h;
    auto l = slurm::launcher::create(lo, so);
    EXPECT_TRUE(l) << l.err().to_string();
    return l ? std::move(*l) : nullptr;
  }

  expected<node_handle> launch(const std::string& name = "worker-0") {
    node_spec spec;
    spec.id = {name, 1};
    spec.argv = {"troupe", "node"};
    return l->launch(spec);
  }

  // Makes the launcher and launches a node (Slurm job 4242) with it.
  expected<node_handle> start() {
    l = launcher();
    if (!l) return make_unexpected(cluster_errc::launch_failed, "no launcher");
    return launch();
  }

  // Launches a node and fences it; the clock must not move meanwhile.
  expected<void> fence_a_node() {
    auto h = start();
    if (!h) return h.err();
    const auto t0 = clk.now();
    auto r = l->fence(*h);
    EXPECT_EQ(clk.now(), t0) << "fence() waited on the launcher's clock";
    return r;
  }

  std::string calls(const std::string& log = "calls.log") const {
    std::ifstream in(bin.str() + "/" + log);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // Lets the watcher look again and again (the clock moved by a poll_interval each time) until
  // `done`; false after 200 looks.
  bool looks_until(const std::function<bool()>& done) {
    for (int i = 0; i < 200; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(50ms);
      clk.advance(look);
    }
    return done();
  }
  // `n` more looks, for what must not happen.
  void looks(int n) {
    for (int i = 0; i < n; ++i) {
      std::this_thread::sleep_for(50ms);
      clk.advance(look);
    }
    std::this_thread::sleep_for(100ms);
  }
};

const std::string kill_call = "--batch --signal=9 4242\n";

TEST(slurm_fence, a_refused_signal_is_tried_again_and_a_running_job_is_never_cancelled) {
  fake_slurm slurm("RUNNING", "RUNNING", 2, "scancel: error: Job/step already completing or completed");
  auto fenced = slurm.fence_a_node();
  ASSERT_TRUE(fenced) << fenced.err().to_string();
  const std::string three = kill_call + kill_call + kill_call;
  EXPECT_TRUE(slurm.looks_until([&] { return slurm.calls() == three; })) << slurm.calls();
  slurm.looks(3);
  EXPECT_EQ(slurm.calls(), three) << "killed on the third try (a KILL to the batch step), never a plain "
                                     "cancel, and not again once killed";
}

TEST(slurm_fence, a_job_slurm_has_not_started_is_cancelled) {
  fake_slurm slurm("PENDING", "PENDING", 100, "scancel: error: Job is pending execution");
  auto fenced = slurm.fence_a_node();
  ASSERT_TRUE(fenced) << fenced.err().to_string();
  EXPECT_TRUE(slurm.looks_until([&] { return slurm.calls() == kill_call + "4242\n"; })) << slurm.calls();
  slurm.looks(3);
  EXPECT_EQ(slurm.calls(), kill_call + "4242\n");
}

TEST(slurm_fence, a_job_slurm_says_is_over_is_left_alone) {
  fake_slurm slurm("RUNNING", "COMPLETING", 100, "scancel: error: Job/step already completing or completed");
  auto fenced = slurm.fence_a_node();
  ASSERT_TRUE(fenced) << fenced.err().to_string();
  EXPECT_TRUE(slurm.looks_until([&] { return slurm.calls() == kill_call; })) << slurm.calls();
  slurm.looks(3);
  EXPECT_EQ(slurm.calls(), kill_call) << "neither cancelled nor signalled again";
}

// The runner's loop calls fence(): before, the fence tried scancel until command_timeout there, and
// the job had no progress line and no node handling for the outage's first 20 s.
TEST(slurm_fence, a_fence_while_the_controller_does_not_answer_returns_at_once_and_kills_when_it_answers) {
  fake_slurm slurm("RUNNING", "RUNNING", 0, "");
  slurm.set_down(true);
  auto fenced = slurm.fence_a_node();
  ASSERT_TRUE(fenced) << fenced.err().to_string();
  EXPECT_TRUE(slurm.looks_until([&] { return slurm.l->outage().has_value(); })) << "no outage seen";
  slurm.looks(3);
  EXPECT_EQ(slurm.calls(), "") << "no scancel while squeue fails: each would wait out Slurm's own retries";
  slurm.set_down(false);
  EXPECT_TRUE(slurm.looks_until([&] { return slurm.calls() == kill_call; })) << slurm.calls();
  EXPECT_FALSE(slurm.l->outage().has_value());
}

// A signal (a `troupe scale` down's SIGTERM) asked while the controller does not answer goes out
// when it answers, in order, once; a launch meanwhile fails at once (sbatch would wait out Slurm's
// retries) and names the controller.
TEST(slurm_fence, signals_wait_for_the_controller_and_a_launch_fails_at_once_while_it_does_not_answer) {
  fake_slurm slurm("RUNNING", "RUNNING", 0, "");
  auto h = slurm.start();
  ASSERT_TRUE(h) << h.err().to_string();
  slurm.set_down(true);
  ASSERT_TRUE(slurm.looks_until([&] { return slurm.l->outage().has_value(); })) << "no outage seen";
  const auto t0 = slurm.clk.now();
  ASSERT_TRUE(slurm.l->signal(*h, SIGTERM));
  ASSERT_TRUE(slurm.l->signal(*h, SIGUSR1));
  auto second = slurm.launch("worker-1");
  EXPECT_EQ(slurm.clk.now(), t0) << "signal() or launch() waited on the launcher's clock";
  ASSERT_FALSE(second);
  EXPECT_EQ(second.err().code(), make_error_code(cluster_errc::launch_failed));
  EXPECT_NE(second.err().to_string().find("does not answer"), std::string::npos) << second.err().to_string();
  const auto submitted = slurm.calls("sbatch.log");
  EXPECT_EQ(std::count(submitted.begin(), submitted.end(), '\n'), 1) << "sbatch ran again:\n" << submitted;
  slurm.looks(3);
  EXPECT_EQ(slurm.calls(), "");
  slurm.set_down(false);
  const std::string both = "--full --signal=15 4242\n--full --signal=10 4242\n";
  EXPECT_TRUE(slurm.looks_until([&] { return slurm.calls() == both; })) << slurm.calls();
  slurm.looks(3);
  EXPECT_EQ(slurm.calls(), both) << "sent once each";
  EXPECT_TRUE(slurm.launch("worker-1")) << "the controller answers: a launch goes through";
}

// `troupe scale --host` checks the host on the runner's io thread: while the controller does not
// answer, at once and without sinfo (which would wait out Slurm's retries, 9 s), and again once it does.
TEST(slurm_fence, a_host_is_checked_at_once_while_the_controller_does_not_answer) {
  fake_slurm slurm("RUNNING", "RUNNING", 0, "");
  auto h = slurm.start();
  ASSERT_TRUE(h) << h.err().to_string();
  ASSERT_TRUE(slurm.l->check_host("h1"));
  slurm.set_down(true);
  ASSERT_TRUE(slurm.looks_until([&] { return slurm.l->outage().has_value(); })) << "no outage seen";
  const auto asked = slurm.calls("sinfo.log");
  auto refused = slurm.l->check_host("h1");
  ASSERT_FALSE(refused);
  EXPECT_NE(
      refused.err().to_string().find("host 'h1' cannot be checked: the Slurm controller does not answer"),
      std::string::npos)
      << refused.err().to_string();
  EXPECT_EQ(slurm.calls("sinfo.log"), asked) << "sinfo ran during the outage";
  slurm.set_down(false);
  ASSERT_TRUE(slurm.looks_until([&] { return !slurm.l->outage().has_value(); }));
  EXPECT_TRUE(slurm.l->check_host("h1"));
}

TEST(slurm_fence, a_node_already_reported_is_no_node) {
  fake_slurm slurm("COMPLETED", "COMPLETED", 0, "");
  auto h = slurm.start();
  ASSERT_TRUE(h) << h.err().to_string();
  ASSERT_TRUE(slurm.looks_until([&] { return slurm.l->running().empty(); })) << "no exit report";
  auto fenced = slurm.l->fence(*h);
  ASSERT_FALSE(fenced);
  EXPECT_EQ(fenced.err().code(), make_error_code(cluster_errc::no_such_node));
  EXPECT_EQ(slurm.calls(), "");
}

// kill_all (the runner's end) against a controller that answers only after most of command_timeout:
// scancel is tried until it is taken (5 tries, 50 of the 60 minutes), and the jobs it cancelled are
// then awaited a whole command_timeout more as they leave squeue (5 looks here). Before, the tries
// had used up the timeout: kill_all returned with the job still listed, and the runner said "jobs
// 4242 are left; cancel them once it does" of jobs the controller had taken the cancel of
// (slurm_outage, under load).
TEST(slurm_fence, kill_all_awaits_the_jobs_it_cancelled_once_the_controller_answers) {
  fake_slurm slurm("RUNNING", "RUNNING", 0, "");
  auto h = slurm.start();
  ASSERT_TRUE(h) << h.err().to_string();
  const std::string dir = slurm.bin.str();
  write_tool(
      dir, "scancel",
      "echo \"$*\" >> " + dir + "/calls.log\nn=$(cat " + dir +
          "/tries 2>/dev/null || echo 0)\necho $((n + 1)) > " + dir +
          "/tries\nif [ \"$n\" -lt 5 ]; then echo 'scancel: error: Unable to contact slurm controller " +
          "(connect failure)' >&2; exit 1; fi\ntouch " + dir + "/cancelled\nexit 0");
  write_tool(
      dir, "squeue",
      "if [ -e " + dir + "/cancelled ]; then n=$(cat " + dir +
          "/looks 2>/dev/null || echo 0); echo $((n + 1)) > " + dir +
          "/looks; [ \"$n\" -ge 4 ] && exit 0; fi\ncase \"$*\" in *'%i|%T'*) echo '4242|RUNNING|h1|None' ;; "
          "*) echo RUNNING ;; esac");
  slurm.l->kill_all();
  EXPECT_EQ(slurm.calls(), "4242\n4242\n4242\n4242\n4242\n4242\n") << "tried until taken, then not again";
  EXPECT_TRUE(slurm.l->running().empty()) << "kill_all returned with the job it cancelled still listed";
}

}  // namespace
}  // namespace troupe::cluster::testing
