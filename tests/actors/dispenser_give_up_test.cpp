// The dispenser gives up on a job whose tasks fail one after another (a damaged store, a model that
// fails every step): job.max_quarantined_in_a_row tasks quarantined with none done between them and
// it hands out no more tasks, answers "finished" once none is held, and says why in its counts; the
// tasks left stay TODO (for --resume). Before, it tried every task first: 2,925 tasks, 224 s.
#include <gtest/gtest.h>

#include "dispenser_fixture.hpp"

namespace troupe::actors {
namespace {

class dispenser_give_up_test : public dispenser_test {
 protected:
  // 8 tasks of 5 records; one failure quarantines a task.
  void reopen(std::uint32_t limit) {
    disp_.reset();
    std::filesystem::remove_all(dir_ + "/journal");
    node_->spec().job.records_per_task = 5;
    node_->spec().job.max_task_failures = 1;
    node_->spec().job.max_quarantined_in_a_row = limit;
    disp_.emplace(*node_, data_paths{dir_ + "/train", ""});
    ASSERT_EQ(disp_->counts()->todo, 8u);
  }
  // `w` leases a task and reports it failed (quarantined) or done; false if it got none.
  bool train(const node_id& w, bool fails) {
    auto r = request(w);
    if (!r.task) return false;
    EXPECT_EQ(report(w, r.id, r.attempt, fails ? "storage: corrupt record: page 7" : ""), "");
    return true;
  }
};

TEST_F(dispenser_give_up_test, quarantines_in_a_row_end_the_leases_and_the_tasks_left_stay_todo) {
  reopen(2);
  ASSERT_TRUE(train(w0, true));
  ASSERT_TRUE(train(w0, false));  // a task done: the run starts again
  ASSERT_TRUE(train(w0, true));
  auto held = request(w1);  // held while the dispenser gives up
  ASSERT_TRUE(held.task);
  EXPECT_TRUE(disp_->counts()->gave_up.empty());
  ASSERT_TRUE(train(w0, true));  // the second in a row
  auto c = disp_->counts();
  EXPECT_NE(c->gave_up.find("2 tasks in a row were quarantined"), std::string::npos) << c->gave_up;
  EXPECT_NE(c->gave_up.find("its 3 task(s) left"), std::string::npos) << c->gave_up;
  EXPECT_NE(c->gave_up.find("storage: corrupt record: page 7"), std::string::npos) << c->gave_up;
  EXPECT_FALSE(c->all_over()) << "a task is still held";
  EXPECT_TRUE(request(w0).none);
  EXPECT_EQ(report(w1, held.id, held.attempt), "");
  EXPECT_TRUE(request(w0).finished);
  c = disp_->counts();
  EXPECT_TRUE(c->all_over());
  EXPECT_EQ(c->todo, 3u);
  EXPECT_EQ(c->failed, 3u);
  EXPECT_EQ(c->done, 2u);
  EXPECT_EQ(c->doing, 0u);
}

TEST_F(dispenser_give_up_test, with_no_limit_every_task_is_tried) {
  reopen(0);
  int tried = 0;
  while (train(w0, true)) ++tried;
  EXPECT_EQ(tried, 8);
  EXPECT_TRUE(request(w0).finished);
  EXPECT_TRUE(disp_->counts()->gave_up.empty());
  EXPECT_EQ(disp_->counts()->failed, 8u);
}

}  // namespace
}  // namespace troupe::actors
