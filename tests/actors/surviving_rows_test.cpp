// The master's surviving_rows (master/surviving_rows.hpp): which rows of a dead worker's task a
// surviving model holds, from the workers' progress reports, decided at once or once a survivor's
// report covers them (at most `wait` later).
#include <gtest/gtest.h>

#include "master/surviving_rows.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

surviving_rows::rows ring_rows(std::uint64_t task, std::uint64_t trained, std::uint64_t step) {
  return {{task, 1, trained, step}, false};
}

struct surviving_rows_test : ::testing::Test {
  manual_clock clk;
  surviving_rows s;
  // The decision for `holder` now; a deferred one fails the test.
  std::optional<storage::held_rows> gone_now(const std::string& holder) {
    auto d = s.gone(holder, clk.now(), 1s);
    EXPECT_TRUE(d) << holder << ": deferred";
    return d ? d->rows : std::nullopt;
  }
};

TEST_F(surviving_rows_test, a_ring_keeps_the_rows_a_survivors_report_covers) {
  s.note("w1#1", std::nullopt, 12);
  s.note("w0#1", ring_rows(7, 64, 10), 10);
  s.note("w0#1", ring_rows(7, 128, 11), 11);
  auto kept = gone_now("w0#1");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->id, 7u);
  EXPECT_EQ(kept->trained, 128u);
  EXPECT_EQ(kept->step, 11u);
  EXPECT_FALSE(gone_now("w0#1")) << "forgotten once gone";
}

TEST_F(surviving_rows_test, the_decision_waits_for_a_survivors_report_that_covers_the_latest_rows) {
  s.note("w1#1", std::nullopt, 10);
  s.note("w0#1", ring_rows(7, 64, 10), 10);
  s.note("w0#1", ring_rows(7, 192, 12), 12);
  EXPECT_FALSE(s.gone("w0#1", clk.now(), 1s)) << "w1's report of step 10 is older than w0's latest";
  EXPECT_EQ(s.deferred(), std::vector<std::string>{"w0#1"});
  EXPECT_TRUE(s.settle(clk.now()).empty());
  s.note("w1#1", std::nullopt, 11);
  EXPECT_TRUE(s.settle(clk.now()).empty()) << "step 11 does not cover step 12";
  s.note("w1#1", std::nullopt, 13);
  auto d = s.settle(clk.now());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].holder, "w0#1");
  ASSERT_TRUE(d[0].rows);
  EXPECT_EQ(d[0].rows->trained, 192u);
  EXPECT_TRUE(s.deferred().empty());
}

TEST_F(surviving_rows_test, past_the_wait_the_rows_a_survivor_covers_are_kept) {
  s.note("w1#1", std::nullopt, 10);
  s.note("w0#1", ring_rows(7, 64, 10), 10);
  s.note("w0#1", ring_rows(7, 192, 12), 12);
  EXPECT_FALSE(s.gone("w0#1", clk.now(), 1s));
  clk.advance(999ms);
  EXPECT_TRUE(s.settle(clk.now()).empty());
  clk.advance(1ms);
  auto d = s.settle(clk.now());
  ASSERT_EQ(d.size(), 1u);
  ASSERT_TRUE(d[0].rows);
  EXPECT_EQ(d[0].rows->trained, 64u) << "step 12 died with it as far as anyone said";
}

// Every replica died: the new ring starts from a checkpoint of step 11. A deferred decision is taken
// at once with the rows at or before it; the new ring's steps past 11 do not vouch for rows the old
// replicas applied at those steps (they are other steps of another model).
TEST_F(surviving_rows_test, a_ring_restored_from_a_checkpoint_keeps_only_the_rows_it_holds) {
  s.note("w1#1", ring_rows(8, 320, 12), 12);
  s.note("w0#1", ring_rows(7, 64, 10), 10);
  s.note("w0#1", ring_rows(7, 192, 13), 13);
  EXPECT_FALSE(s.gone("w0#1", clk.now(), 1s)) << "w1 may reach step 13 yet";
  auto d = s.restored(11);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].holder, "w0#1");
  ASSERT_TRUE(d[0].rows);
  EXPECT_EQ(d[0].rows->trained, 64u) << "the rows of step 13 are in no model";
  EXPECT_TRUE(s.deferred().empty());
  // w1 (its death not seen yet) applied its rows at step 12: lost too, whatever the new ring reports.
  s.note("w2#1", std::nullopt, 20);
  EXPECT_FALSE(gone_now("w1#1"));
  // The new ring's own rows count as before.
  s.note("w3#1", ring_rows(9, 64, 12), 12);
  auto kept = gone_now("w3#1");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->trained, 64u);
}

TEST_F(surviving_rows_test, a_worker_alone_or_with_no_step_keeps_nothing) {
  s.note("w0#1", ring_rows(7, 64, 10), 10);
  EXPECT_FALSE(gone_now("w0#1")) << "no other replica: its rows died with it";
  s.note("w2#1", ring_rows(9, 64, 0), 0);
  s.note("w3#1", std::nullopt, 50);
  EXPECT_FALSE(gone_now("w2#1")) << "step 0: not known";
  EXPECT_FALSE(gone_now("never-reported#1"));
  s.note("w4#1", ring_rows(9, 64, 60), 60);
  s.note("w4#1", std::nullopt, 61);  // between tasks: its task was reported
  EXPECT_FALSE(gone_now("w4#1"));
}

TEST_F(surviving_rows_test, only_the_current_task_counts) {
  s.note("w1#1", std::nullopt, 100);
  s.note("w0#1", ring_rows(7, 64, 10), 10);
  s.note("w0#1", ring_rows(8, 32, 20), 20);  // task 7 reported done; task 8 since
  s.note("w0#1", ring_rows(8, 64, 21), 21);
  auto kept = gone_now("w0#1");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->id, 8u);
  EXPECT_EQ(kept->trained, 64u);
}

TEST_F(surviving_rows_test, rows_on_the_shards_are_kept_at_once_whatever_the_others) {
  s.note("w0#1", surviving_rows::rows{{5, 2, 100, 0}, true}, 0);
  s.note("w0#1", surviving_rows::rows{{5, 2, 150, 0}, true}, 0);
  auto kept = gone_now("w0#1");
  ASSERT_TRUE(kept);
  EXPECT_EQ(kept->attempt, 2u);
  EXPECT_EQ(kept->trained, 150u);
}

TEST_F(surviving_rows_test, a_dead_worker_no_longer_vouches_for_another) {
  s.note("w1#1", std::nullopt, 40);
  s.note("w0#1", ring_rows(7, 64, 40), 40);
  s.note("w2#1", ring_rows(8, 64, 40), 40);
  EXPECT_FALSE(gone_now("w1#1"));
  ASSERT_TRUE(gone_now("w0#1")) << "w2 holds step 40";
  EXPECT_FALSE(gone_now("w2#1")) << "w0 and w1 are gone: nobody holds step 40";
}

TEST_F(surviving_rows_test, keeps_a_bounded_history) {
  s.note("w1#1", std::nullopt, 1);
  for (std::uint64_t k = 2; k <= 3 * surviving_rows::kept_reports; ++k) s.note("w0#1", ring_rows(7, k, k), k);
  EXPECT_FALSE(s.gone("w0#1", clk.now(), 1s));
  clk.advance(1s);
  auto d = s.settle(clk.now());
  ASSERT_EQ(d.size(), 1u);
  EXPECT_FALSE(d[0].rows) << "the survivor's step 1 is older than every report kept";
}

}  // namespace
}  // namespace troupe::actors
