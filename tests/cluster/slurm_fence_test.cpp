// The Slurm launcher's fence against scripts standing in for Slurm's commands (tests/slurm fences a
// real SIGSTOPped job): a fenced node is killed (scancel --batch --signal=9), never cancelled
// while it runs (a cancel is SIGCONT then SIGTERM: a stopped node woke and left cleanly). A refused
// signal is tried again; only a job Slurm says is PENDING is cancelled; one Slurm says is over is
// no node any more.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "launcher_fixtures.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/slurm/launcher.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::cluster::testing {
namespace {

using namespace std::chrono_literals;

// Slurm's commands as scripts in a temporary directory: sbatch answers job 4242; squeue says the
// job is `state`; scancel writes each call's arguments to calls.log, and refuses its first
// `refusals` signals with `refusal` (a plain cancel always succeeds).
struct fake_slurm {
  temp_dir bin;
  manual_clock clk;
  std::unique_ptr<slurm::launcher> l;

  fake_slurm(const std::string& state, int refusals, const std::string& refusal) {
    write_tool(bin.str(), "sinfo", "echo 0/4/0/4");
    write_tool(bin.str(), "sbatch", "echo 4242");
    write_tool(
        bin.str(), "squeue",
        "case \"$*\" in *'%i|%T'*) echo '4242|" + state + "|h1|None' ;; *) echo " + state + " ;; esac");
    const std::string dir = bin.str();
    write_tool(bin.str(), "scancel",
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

  std::unique_ptr<slurm::launcher> launcher() {
    launcher_options lo;
    lo.clock = clk;
    slurm::options so;
    so.bin_dir = bin.str();
    so.poll_interval = 10min;  // the watcher looks once, then naps past the test
    so.command_timeout = 1h;
    auto l = slurm::launcher::create(lo, so);
    EXPECT_TRUE(l) << l.err().to_string();
    return l ? std::move(*l) : nullptr;
  }

  // Launches a node (Slurm job 4242) and fences it.
  expected<void> fence_a_node() {
    l = launcher();
    if (!l) return make_unexpected(cluster_errc::launch_failed, "no launcher");
    node_spec spec;
    spec.id = {"worker-0", 1};
    spec.argv = {"troupe", "node"};
    auto h = l->launch(spec);
    if (!h) return h.err();
    return l->fence(*h);
  }

  std::string calls() const {
    std::ifstream in(bin.str() + "/calls.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

TEST(slurm_fence, a_refused_signal_is_tried_again_and_a_running_job_is_never_cancelled) {
  fake_slurm slurm("RUNNING", 2, "scancel: error: Unable to contact slurm controller (connect failure)");
  auto fenced = slurm.fence_a_node();
  ASSERT_TRUE(fenced) << fenced.err().to_string();
  EXPECT_EQ(slurm.calls(), "--batch --signal=9 4242\n--batch --signal=9 4242\n--batch --signal=9 4242\n")
      << "killed on the third try (a KILL to the batch step), never a plain cancel";
}

TEST(slurm_fence, a_job_slurm_has_not_started_is_cancelled) {
  fake_slurm slurm("PENDING", 100, "scancel: error: Job is pending execution");
  auto fenced = slurm.fence_a_node();
  ASSERT_TRUE(fenced) << fenced.err().to_string();
  EXPECT_EQ(slurm.calls(), "--batch --signal=9 4242\n4242\n");
}

TEST(slurm_fence, a_job_slurm_says_is_over_is_no_node_and_is_not_cancelled) {
  fake_slurm slurm("COMPLETED", 100, "scancel: error: Job/step already completing or completed");
  auto fenced = slurm.fence_a_node();
  ASSERT_FALSE(fenced);
  EXPECT_EQ(fenced.err().code(), make_error_code(cluster_errc::no_such_node));
  EXPECT_NE(fenced.err().to_string().find("COMPLETED"), std::string::npos) << fenced.err().to_string();
  EXPECT_EQ(slurm.calls(), "--batch --signal=9 4242\n");
}

TEST(slurm_fence, a_signal_refused_until_the_limit_is_the_fences_error) {
  fake_slurm slurm("RUNNING", 1000, "scancel: error: Unable to contact slurm controller (connect failure)");
  const auto t0 = slurm.clk.now();
  auto fenced = slurm.fence_a_node();
  ASSERT_FALSE(fenced);
  EXPECT_NE(fenced.err().to_string().find("Unable to contact"), std::string::npos)
      << fenced.err().to_string();
  EXPECT_GE(slurm.clk.now() - t0, 1h) << "it gave up only at command_timeout on its clock";
  EXPECT_EQ(slurm.calls().find("\n4242\n"), std::string::npos) << "never cancelled:\n" << slurm.calls();
}

}  // namespace
}  // namespace troupe::cluster::testing
