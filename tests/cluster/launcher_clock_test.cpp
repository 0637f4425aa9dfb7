// The launchers' deadlines read the clock they are given (launcher_options::clock): on a manual
// clock a wait times out, and the Slurm launcher's kill_all gives up on an unreachable controller,
// when the test moves the clock past the limit, never by real time (each limit here is an hour).
#include <gtest/gtest.h>

#include <fstream>
#include <future>

#include "launcher_fixtures.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/slurm/launcher.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::cluster::testing {
namespace {

using namespace std::chrono_literals;

// Moves `clk` an hour at a time until `f` is done; how many hours that took, -1 if it never was.
template <typename Future>
int hours_until(manual_clock& clk, Future& f) {
  for (int h = 1; h <= 500; ++h) {
    clk.advance(1h);
    if (f.wait_for(10ms) == std::future_status::ready) return h;
  }
  return -1;
}

TEST(launcher_clock, a_local_wait_times_out_when_the_launchers_clock_passes_its_limit) {
  manual_clock clk;
  exit_log log;
  launcher_options o;
  o.on_exit = log.callback();
  o.capacity = resources{64, 1ull << 40, 0};
  o.clock = clk;
  auto l = local_launcher::create(o);
  ASSERT_TRUE(l) << l.err().to_string();
  auto h = (*l)->launch(sleeper("sleeper"));
  ASSERT_TRUE(h) << h.err().to_string();
  auto waited = std::async(std::launch::async, [&] { return (*l)->wait(*h, 1h); });
  EXPECT_GE(hours_until(clk, waited), 1);
  auto r = waited.get();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err().code(), make_error_code(cluster_errc::timed_out)) << r.err().to_string();
  EXPECT_EQ((*l)->running().size(), 1u) << "the node still runs: only the wait ended";
  (*l)->kill_all();
  EXPECT_TRUE(log.wait_for(*h, 10s));
}

// Slurm commands in a directory of scripts: sinfo and sbatch answer, the rest cannot reach the
// controller (slurmctld down).
TEST(launcher_clock, slurm_kill_all_gives_up_on_a_silent_controller_at_its_limit_on_the_clock) {
  temp_dir dir;
  write_tool(dir.str(), "sinfo", "echo 0/4/0/4");
  write_tool(dir.str(), "sbatch", "echo 4242");
  for (const char* tool : {"squeue", "scancel", "scontrol"})
    write_tool(dir.str(), tool,
               "echo 'error: Unable to contact slurm controller (connect failure)' >&2; exit 1");
  manual_clock clk;
  launcher_options lo;
  lo.clock = clk;
  slurm::options so;
  so.bin_dir = dir.str();
  so.poll_interval = 10min;  // the watcher thread looks once, then naps past the test
  so.command_timeout = 1h;
  auto l = slurm::launcher::create(lo, so);
  ASSERT_TRUE(l) << l.err().to_string();
  node_spec spec;
  spec.id = {"worker-0", 1};
  spec.argv = {"troupe", "node"};
  auto h = (*l)->launch(spec);
  ASSERT_TRUE(h) << h.err().to_string();
  EXPECT_EQ(h->pid, 4242);

  const auto t0 = clk.now();
  (*l)->kill_all();  // scancel cannot reach the controller: asked again every poll_interval
  EXPECT_GE(clk.now() - t0, 1h) << "it gave up only at command_timeout on its clock";
  EXPECT_LT(clk.now() - t0, 1h + so.poll_interval);
  EXPECT_EQ((*l)->running().size(), 1u) << "not cancelled: the controller never answered";
  auto outage = (*l)->outage();
  ASSERT_TRUE(outage);
  EXPECT_EQ(outage->since, t0) << "the outage began at the first failed command, on the launcher's clock";
  EXPECT_NE(outage->why.find("Unable to contact"), std::string::npos) << outage->why;
}

}  // namespace
}  // namespace troupe::cluster::testing
