// The end-of-job evaluation's parts (master/eval_round.hpp): spread over the workers, moved when a
// worker leaves or does not answer, failed past max_failures, and combined into the whole test set's
// metrics (rows-weighted loss and accuracy, the AUC of every part's scores).
#include <gtest/gtest.h>

#include <set>

#include "master/eval_round.hpp"
#include "troupe/nn/metrics.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

eval_answer part(std::uint64_t rows, double loss, double accuracy, std::vector<float> scores = {},
                 std::vector<float> labels = {}) {
  return {rows, loss, accuracy, std::move(scores), std::move(labels), ""};
}

TEST(eval_round, parts_go_to_every_worker_and_combine_into_the_whole_test_sets_metrics) {
  manual_clock clk;
  eval_round r(8, 3, 120s);
  r.start({"worker-0", "worker-1", "worker-2"}, true);
  auto asks = r.due({"worker-0", "worker-1", "worker-2"}, clk.now());
  ASSERT_EQ(asks.size(), 3u);
  std::set<std::string> who;
  for (const auto& a : asks) {
    who.insert(a.worker);
    EXPECT_EQ(a.parts, 3u);
    EXPECT_EQ(a.write_state, a.part == 0);  // one worker writes the job's final state
  }
  EXPECT_EQ(who.size(), 3u);
  EXPECT_TRUE(r.due({"worker-0", "worker-1", "worker-2"}, clk.now()).empty());  // nothing more is due
  EXPECT_FALSE(r.answer(asks[0].id, asks[0].worker, part(2, 1.0, 0.5, {0.9f, 0.2f}, {1, 0})));
  EXPECT_FALSE(r.result());
  EXPECT_FALSE(r.answer(asks[1].id, asks[1].worker, part(1, 4.0, 0.0, {0.6f}, {0})));
  EXPECT_FALSE(r.answer(asks[2].id, asks[2].worker, part(1, 1.0, 1.0, {0.1f}, {0})));
  auto m = r.result();
  ASSERT_TRUE(m);
  EXPECT_EQ(m->rows, 4u);
  EXPECT_DOUBLE_EQ(m->loss, (2 * 1.0 + 4.0 + 1.0) / 4);
  EXPECT_DOUBLE_EQ(m->accuracy, (2 * 0.5 + 0 + 1) / 4);
  ASSERT_TRUE(m->auc);
  EXPECT_DOUBLE_EQ(*m->auc,
                   nn::auc(std::vector<float>{0.9f, 0.2f, 0.6f, 0.1f}, std::vector<float>{1, 0, 0, 0}));
}

TEST(eval_round, a_part_whose_worker_left_or_is_silent_goes_to_another) {
  manual_clock clk;
  eval_round r(8, 3, 120s);
  r.start({"worker-0", "worker-1"}, true);
  auto asks = r.due({"worker-0", "worker-1"}, clk.now());
  ASSERT_EQ(asks.size(), 2u);
  const auto lost = asks[1];
  r.gone(lost.worker);
  const std::string other = lost.worker == "worker-0" ? "worker-1" : "worker-0";
  auto again = r.due({other}, clk.now());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].worker, other);
  EXPECT_EQ(again[0].part, lost.part);
  EXPECT_FALSE(r.answer(lost.id, lost.worker, part(1, 1, 1)));  // the old request's answer: ignored
  EXPECT_FALSE(r.result());
  clk.advance(121s);  // nobody answered part 0 either: asked again
  EXPECT_EQ(r.due({other}, clk.now()).size(), 2u);
}

// An evaluation slower than the timeout: the part is asked again (a new id), and the answer to the
// first ask, from the worker it went to, completes it (every answer was ignored as stale, and a torch
// job whose one worker took 124 s evaluated for ever).
TEST(eval_round, a_slow_answer_to_an_ask_that_timed_out_completes_its_part) {
  manual_clock clk;
  eval_round r(8, 3, 120s);
  r.start({"worker-0"}, false);
  auto first = r.due({"worker-0"}, clk.now());
  ASSERT_EQ(first.size(), 1u);
  clk.advance(121s);
  auto again = r.due({"worker-0"}, clk.now());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_NE(again[0].id, first[0].id);
  EXPECT_FALSE(r.answer(first[0].id, "worker-1", part(5, 1, 1)));  // not the worker it was sent to
  EXPECT_FALSE(r.result());
  EXPECT_FALSE(r.answer(first[0].id, "worker-0", part(5, 0.5, 0.8)));
  auto m = r.result();
  ASSERT_TRUE(m);
  EXPECT_DOUBLE_EQ(m->accuracy, 0.8);
  EXPECT_FALSE(r.answer(again[0].id, "worker-0", part(5, 9, 0)));  // the second: the part is answered
  EXPECT_DOUBLE_EQ(r.result()->accuracy, 0.8);
}

// A part that timed out goes to another worker among the least loaded: the one it timed out on is
// still evaluating it (its late answer counts), and asked again it would start over only after that.
// Both parts timing out together went back each to its own worker (the first among equals).
TEST(eval_round, a_part_that_timed_out_goes_to_another_worker_among_equals) {
  manual_clock clk;
  eval_round r(8, 3, 120s);
  const std::vector<std::string> both{"worker-0", "worker-1"};
  r.start(both, true);
  auto first = r.due(both, clk.now());
  ASSERT_EQ(first.size(), 2u);
  clk.advance(121s);
  auto again = r.due(both, clk.now());
  ASSERT_EQ(again.size(), 2u);
  for (const auto& a : again) {
    const auto& before = first[a.part];
    ASSERT_EQ(before.part, a.part);
    EXPECT_NE(a.worker, before.worker) << "part " << a.part;
  }
  // The worker it timed out on, alone, is asked again.
  EXPECT_FALSE(r.answer(first[0].id, first[0].worker, part(1, 1, 1)));
  clk.advance(121s);
  auto third = r.due({again[1].worker}, clk.now());
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0].part, 1u);
  EXPECT_EQ(third[0].worker, again[1].worker);
}

// One part goes to the first of the candidates (the master lists the one that trained most first): it
// went to the first by name, a replacement of 13 steps whose batch norm statistics were its own.
TEST(eval_round, one_part_goes_to_the_first_candidate) {
  manual_clock clk;
  eval_round r(8, 3, 120s);
  r.start({"worker-2", "worker-0", "worker-1"}, false);
  auto asks = r.due({"worker-2", "worker-0", "worker-1"}, clk.now());
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].worker, "worker-2");
}

TEST(eval_round, local_sgd_has_one_part_and_errors_fail_the_round_past_the_limit) {
  manual_clock clk;
  eval_round r(8, 2, 120s);
  r.start({"worker-0", "worker-1"}, false);
  auto asks = r.due({"worker-0", "worker-1"}, clk.now());
  ASSERT_EQ(asks.size(), 1u);
  EXPECT_EQ(asks[0].parts, 1u);
  eval_answer bad = part(0, 0, 0);
  bad.error = "forward failed";
  EXPECT_EQ(r.answer(asks[0].id, asks[0].worker, bad), "forward failed");
  EXPECT_FALSE(r.failed());
  auto again = r.due({"worker-0", "worker-1"}, clk.now());
  ASSERT_EQ(again.size(), 1u);
  EXPECT_TRUE(r.answer(again[0].id, again[0].worker, bad));
  EXPECT_TRUE(r.failed());
  EXPECT_NE(r.last_error().find("forward failed"), std::string::npos);
}

// A full disk under checkpoints/final is no failure of the model: the part is asked again 2 s after
// its last ask, however often, and the round completes once the write succeeds.
TEST(eval_round, a_disk_fault_writing_the_final_state_is_asked_again_and_never_counts) {
  manual_clock clk;
  eval_round r(8, 2, 120s, 2s);
  r.start({"worker-0"}, false);
  auto asks = r.due({"worker-0"}, clk.now());
  ASSERT_EQ(asks.size(), 1u);
  eval_answer full = part(10, 0.5, 0.9);
  full.error = "no space left on device: checkpoints/final";
  full.disk_fault = true;
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(r.answer(asks[0].id, asks[0].worker, full), full.error);
    EXPECT_FALSE(r.failed()) << "try " << i;
    EXPECT_TRUE(r.due({"worker-0"}, clk.now()).empty()) << "asked again at once";
    clk.advance(1s);
    EXPECT_TRUE(r.due({"worker-0"}, clk.now()).empty()) << "asked again within 2 s";
    clk.advance(1s);
    asks = r.due({"worker-0"}, clk.now());
    ASSERT_EQ(asks.size(), 1u) << "not asked again 2 s on";
    EXPECT_TRUE(asks[0].write_state);
  }
  EXPECT_EQ(r.failures(), 0u);
  EXPECT_FALSE(r.answer(asks[0].id, asks[0].worker, part(10, 0.5, 0.9)));
  ASSERT_TRUE(r.result());
  EXPECT_EQ(r.result()->rows, 10u);
}

}  // namespace
}  // namespace troupe::actors
