// The cluster page's pure pieces: sacct and sinfo text to allocations, and allocations to the
// stacked series and the utilisation (the live proof is tests/slurm/slurm_dashboard_test.sh).
#include "troupe/observe/cluster_usage.hpp"

#include <gtest/gtest.h>

namespace troupe::observe {
namespace {

TEST(cluster_usage, parses_sacct_skipping_pending_and_garbage) {
  auto a = parse_sacct(
      "101|troupe-j1:master|high|1|1000|1010|COMPLETED\n"
      "102|troupe-j1:worker-0|low|2|1002|Unknown|RUNNING\n"
      "103|troupe-j1:worker-1|low|0|Unknown|Unknown|PENDING\n"
      "not|a|line\n"
      "104|troupe-j1:worker-2|low|x|1000|1001|FAILED\n"
      "105|troupe-j2:ps-0|high|4|2026-11-23T16:20:01|2026-11-23T16:20:11|PREEMPTED\n");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].slurm_id, "101");
  EXPECT_EQ(a[0].cpus, 1);
  EXPECT_EQ(a[0].start_ms, 1'000'000);
  EXPECT_EQ(a[0].end_ms, 1'010'000);
  EXPECT_EQ(a[1].end_ms, -1);
  EXPECT_EQ(a[1].state, "RUNNING");
  EXPECT_EQ(a[2].partition, "high");
  EXPECT_EQ(a[2].end_ms - a[2].start_ms, 10'000);  // local ISO times read too
  EXPECT_EQ(node_of_job_name(a[1].name), "worker-0");
  EXPECT_EQ(node_of_job_name("allocation"), "");
}

TEST(cluster_usage, counts_each_node_once) {
  EXPECT_EQ(parse_sinfo_cpus("h1|4\nh2|4\nh1|4\nh3|8\nbad\n|4\nh4|x\n"), 16);
  EXPECT_EQ(parse_sinfo_cpus(""), 0);
}

TEST(cluster_usage, stacks_per_job_with_time_weighted_utilisation) {
  auto alloc = [](const std::string& group, int cpus, std::int64_t s, std::int64_t e) {
    grouped_allocation g;
    g.group = group;
    g.a.cpus = cpus;
    g.a.start_ms = s;
    g.a.end_ms = e;
    return g;
  };
  // Job a holds 2 CPUs over [0, 10) and 2 more over [5, 10); job b 4 CPUs from 5, still running at 20.
  auto s = stack_usage({alloc("a", 2, 0, 10), alloc("a", 2, 5, 10), alloc("b", 4, 5, -1)}, 8, 20);
  ASSERT_EQ(s.t_ms, (std::vector<std::int64_t>{0, 5, 10, 20}));
  ASSERT_EQ(s.groups, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.cpus[0], (std::vector<int>{2, 4, 0, 0}));
  EXPECT_EQ(s.cpus[1], (std::vector<int>{0, 4, 4, 0}));
  EXPECT_DOUBLE_EQ(s.utilisation[1], 1.0);
  EXPECT_DOUBLE_EQ(s.utilisation[2], 0.5);
  // (2*5 + 8*5 + 4*10) / (8 * 20)
  EXPECT_DOUBLE_EQ(s.average, 90.0 / 160.0);
  auto none = stack_usage({}, 8, 20);
  EXPECT_TRUE(none.t_ms.empty());
  EXPECT_EQ(none.average, 0);
  EXPECT_EQ(stack_usage({alloc("a", 2, 0, 10)}, 0, 20).utilisation[0], 0);
}

}  // namespace
}  // namespace troupe::observe
