// The worker's task_lease_client on a fake node (renewals), a fake rpc channel (lease requests and
// task reports) and a manual clock: it leases ahead only when asked to, naming what it holds;
// renews the held leases every third of the lease time, before they expire; resends a report until
// it is acknowledged; and drops a lost lease (a request without an answer, a report refused as
// stale) without holding on to it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "fake_node.hpp"
#include "fake_rpc.hpp"
#include "worker/task_lease_client.hpp"

namespace troupe::actors {
namespace {

using B = schema::Envelope::Body;
using lease = task_lease_client::lease;
using kind = task_lease_client::answer::kind;
using namespace std::chrono_literals;
using testing::fake_node;
using testing::fake_rpc;

class task_lease_client_test : public ::testing::Test {
 protected:
  // Answers request `id` with task `task` (attempt 1, records [10 * task, 10 * task + 10)).
  void grant(std::uint64_t id, std::uint64_t task, std::uint64_t lease_ms = 300) {
    rpc_.answer(id, [&](auto body) {
      auto l = body.initTaskLease();
      l.setLeaseMs(lease_ms);
      auto t = l.initTask();
      t.setId(task);
      t.setAttempt(1);
      t.setFirstRecord(10 * task);
      t.setRecordCount(10);
    });
  }
  void ack(std::uint64_t id, const std::string& error = "") {
    rpc_.answer(id, [&](auto body) { body.initTaskReportAck().setError(error); });
  }
  std::vector<const fake_rpc::sent*> requests() const { return rpc_.of(B::TASK_REQUEST); }
  std::vector<const fake_rpc::sent*> reports() const { return rpc_.of(B::TASK_REPORT); }
  static std::vector<std::uint64_t> holding(const fake_rpc::sent* s) {
    std::vector<std::uint64_t> h;
    for (auto id : s->m.body().getTaskRequest().getHolding()) h.push_back(id);
    return h;
  }
  // The task ids of each renewal sent since the last look.
  std::vector<std::vector<std::uint64_t>> renewals() {
    std::vector<std::vector<std::uint64_t>> r;
    for (auto& s : node_.take()) {
      if (s.m.kind() != B::TASK_RENEW) continue;
      EXPECT_EQ(s.node, "master");
      EXPECT_EQ(s.to, "dispenser");
      std::vector<std::uint64_t> ids;
      for (auto l : s.m.body().getTaskRenew().getLeases()) ids.push_back(l.getTaskId());
      r.push_back(std::move(ids));
    }
    return r;
  }
  // Asks for a lease holding nothing and takes task `task`'s grant.
  lease lease_one(std::uint64_t task, std::uint64_t lease_ms = 300) {
    EXPECT_FALSE(client_.pump_lease(true, {}));
    grant(requests().back()->id, task, lease_ms);
    auto a = client_.pump_lease(true, {});
    EXPECT_TRUE(a && a->what == kind::task);
    return a ? a->task : lease{};
  }

  fake_node node_{node_identity{node_id{"worker-0", 1}, cluster::node_role::worker, 0, "", "job", "job", 0}};
  fake_rpc rpc_{node_.clock(), node_.self()};
  task_lease_client client_{node_, rpc_};
};

TEST_F(task_lease_client_test, leases_ahead_only_when_the_worker_wants_naming_what_it_holds) {
  EXPECT_FALSE(client_.pump_lease(false, {}));
  EXPECT_TRUE(requests().empty());
  EXPECT_FALSE(client_.pump_lease(true, {}));
  ASSERT_EQ(requests().size(), 1u);
  EXPECT_EQ(requests()[0]->node, "master");
  EXPECT_EQ(requests()[0]->to, "dispenser");
  EXPECT_TRUE(holding(requests()[0]).empty());
  EXPECT_TRUE(client_.asking());
  // On its way: not asked again.
  EXPECT_FALSE(client_.pump_lease(true, {}));
  EXPECT_EQ(requests().size(), 1u);
  grant(requests()[0]->id, 7);
  auto a = client_.pump_lease(true, {});
  ASSERT_TRUE(a);
  ASSERT_EQ(a->what, kind::task);
  EXPECT_EQ(a->task.id, 7u);
  EXPECT_EQ(a->task.attempt, 1u);
  EXPECT_EQ(a->task.first, 70u);
  EXPECT_EQ(a->task.count, 10u);
  EXPECT_FALSE(client_.asking());
  // The next task, asked for ahead (the worker trains task 7): the request names task 7 and the
  // task whose report is not acknowledged yet.
  client_.report(lease{3, 2, 30, 10}, "");
  const lease held[] = {a->task};
  EXPECT_FALSE(client_.pump_lease(true, held));
  ASSERT_EQ(requests().size(), 2u);
  EXPECT_EQ(holding(requests()[1]), (std::vector<std::uint64_t>{7, 3}));
}

TEST_F(task_lease_client_test, none_left_asks_again_later_and_finished_asks_no_more) {
  EXPECT_FALSE(client_.pump_lease(true, {}));
  rpc_.answer(requests()[0]->id, [](auto body) { body.initTaskLease().setNone(); });
  auto a = client_.pump_lease(true, {});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->what, kind::none);
  const auto answered = node_.clock().now();
  EXPECT_EQ(client_.next_due(answered + 1s), answered + 20ms);
  node_.manual().advance(19ms);
  EXPECT_FALSE(client_.pump_lease(true, {}));
  EXPECT_EQ(requests().size(), 1u);
  node_.manual().advance(1ms);
  EXPECT_FALSE(client_.pump_lease(true, {}));
  ASSERT_EQ(requests().size(), 2u);
  rpc_.answer(requests()[1]->id, [](auto body) { body.initTaskLease().setFinished(); });
  a = client_.pump_lease(true, {});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->what, kind::finished);
  EXPECT_TRUE(client_.exhausted());
  node_.manual().advance(10s);
  EXPECT_FALSE(client_.pump_lease(true, {}));
  EXPECT_EQ(requests().size(), 2u);
}

TEST_F(task_lease_client_test, held_leases_are_renewed_every_third_before_they_expire) {
  auto t = lease_one(7, 300);
  const auto leased_at = node_.clock().now();
  client_.report(lease{3, 1, 30, 10}, "");  // unacknowledged: still held
  const lease held[] = {t, lease{9, 1, 90, 10}};
  EXPECT_EQ(client_.next_due(leased_at + 1s), leased_at + 100ms);
  node_.manual().advance(99ms);
  client_.pump_renew(held);
  EXPECT_TRUE(renewals().empty());
  node_.manual().advance(1ms);
  client_.pump_renew(held);
  EXPECT_EQ(renewals(), (std::vector<std::vector<std::uint64_t>>{{7, 9, 3}}));
  client_.pump_renew(held);
  EXPECT_TRUE(renewals().empty());  // not again before another third
  node_.manual().advance(100ms);
  client_.pump_renew(held);
  EXPECT_EQ(renewals().size(), 1u);
  // Every renewal went out well before the 300 ms lease ran out since the one before.
  EXPECT_LT(node_.clock().now(), leased_at + 300ms);
}

// A step longer than the lease (a user module's 50 s forward): pump_renew runs between steps only,
// and the tasks were re-queued while the worker lived (their rows trained twice). The client's
// thread renews the leases held as the step began each third of the lease while it runs, and for
// 10 lease times at most (a step hung for good gives its tasks up); none once the step ended.
TEST_F(task_lease_client_test, a_step_longer_than_the_lease_keeps_its_leases) {
  auto t = lease_one(7, 150);
  const lease held[] = {t};
  // Moves the manual clock `by` in 5 ms steps, as fast as real time (the thread naps 25 ms).
  auto run_for = [&](std::chrono::milliseconds by) {
    for (auto left = by; left > 0ms; left -= 5ms) {
      node_.manual().advance(5ms);
      std::this_thread::sleep_for(5ms);
    }
  };
  client_.step_begins(held);
  run_for(140ms);  // almost a lease: renewed by the thread meanwhile
  auto during = renewals();
  ASSERT_FALSE(during.empty()) << "no renewal while the step ran";
  EXPECT_EQ(during.front(), (std::vector<std::uint64_t>{7}));
  run_for(1500ms);  // 10 lease times in all: no more after
  renewals();
  run_for(300ms);
  EXPECT_TRUE(renewals().empty()) << "renewed past 10 lease times: a hung step held its tasks for good";
  client_.step_ends();
  client_.step_begins(held);  // a new step, ended at once: nothing from the thread
  client_.step_ends();
  run_for(300ms);
  EXPECT_TRUE(renewals().empty());
}

TEST_F(task_lease_client_test, a_report_is_resent_until_acknowledged) {
  client_.report(lease{7, 1, 70, 10}, "");
  client_.pump_reports();
  ASSERT_EQ(reports().size(), 1u);
  EXPECT_EQ(reports()[0]->to, "dispenser");
  EXPECT_EQ(reports()[0]->m.body().getTaskReport().which(), schema::TaskReport::DONE);
  // The dispenser's node went down: sent again at once.
  rpc_.fail(reports()[0]->id);
  client_.pump_reports();
  ASSERT_EQ(reports().size(), 2u);
  // No answer within the request's second: sent again once it timed out, not before.
  node_.manual().advance(999ms);
  client_.pump_reports();
  EXPECT_EQ(reports().size(), 2u);
  node_.manual().advance(1ms);
  client_.pump_reports();
  ASSERT_EQ(reports().size(), 3u);
  // Unreachable master: retried after 100 ms, not at every pass.
  rpc_.reachable = false;
  rpc_.fail(reports()[2]->id);
  client_.pump_reports();
  client_.pump_reports();
  EXPECT_EQ(rpc_.attempts[B::TASK_REPORT], 4u);
  rpc_.reachable = true;
  node_.manual().advance(100ms);
  client_.pump_reports();
  ASSERT_EQ(reports().size(), 4u);
  EXPECT_EQ(reports()[3]->m.body().getTaskReport().getTaskId(), 7u);
  ack(reports()[3]->id);
  client_.pump_reports();
  EXPECT_EQ(client_.unacknowledged(), 0u);
  node_.manual().advance(5s);
  client_.pump_reports();
  EXPECT_EQ(reports().size(), 4u);
}

TEST_F(task_lease_client_test, reports_go_one_at_a_time_oldest_first) {
  client_.report(lease{7, 1, 70, 10}, "");
  client_.report(lease{8, 1, 80, 10}, "bad record");
  client_.pump_reports();
  client_.pump_reports();
  ASSERT_EQ(reports().size(), 1u);
  EXPECT_EQ(reports()[0]->m.body().getTaskReport().getTaskId(), 7u);
  ack(reports()[0]->id);
  client_.pump_reports();
  ASSERT_EQ(reports().size(), 2u);
  auto r = reports()[1]->m.body().getTaskReport();
  EXPECT_EQ(r.getTaskId(), 8u);
  ASSERT_EQ(r.which(), schema::TaskReport::FAILED);
  EXPECT_STREQ(r.getFailed().cStr(), "bad record");
  EXPECT_EQ(client_.unacknowledged(), 1u);
}

TEST_F(task_lease_client_test, a_lost_lease_is_dropped) {
  // A lease request whose answer never comes (lost with the master) is dropped once it timed out,
  // and asked for again 10 ms on.
  EXPECT_FALSE(client_.pump_lease(true, {}));
  ASSERT_EQ(requests().size(), 1u);
  node_.manual().advance(2s);
  EXPECT_FALSE(client_.pump_lease(true, {}));
  EXPECT_FALSE(rpc_.pending(requests()[0]->id));
  EXPECT_FALSE(client_.asking());
  node_.manual().advance(10ms);
  EXPECT_FALSE(client_.pump_lease(true, {}));
  ASSERT_EQ(requests().size(), 2u);
  grant(requests()[1]->id, 7);
  auto t = client_.pump_lease(true, {});
  ASSERT_TRUE(t);
  // The task's report is refused (the lease was taken back: a stale attempt): that is an answer too,
  // the task is held no more, neither renewed nor named in a request.
  client_.report(t->task, "");
  client_.pump_reports();
  ack(reports().back()->id, "stale attempt");
  client_.pump_reports();
  EXPECT_EQ(client_.unacknowledged(), 0u);
  node_.manual().advance(100ms);
  client_.pump_renew({});
  EXPECT_TRUE(renewals().empty());
  EXPECT_FALSE(client_.pump_lease(true, {}));
  ASSERT_EQ(requests().size(), 3u);
  EXPECT_TRUE(holding(requests()[2]).empty());
}

TEST_F(task_lease_client_test, waits_for_the_lease_answer_until_the_deadline) {
  EXPECT_FALSE(client_.pump_lease(true, {}));
  const auto start = node_.clock().now();
  client_.wait_for_lease(start + 50ms);
  EXPECT_EQ(rpc_.waits, 1u);
  EXPECT_EQ(node_.clock().now(), start + 50ms);
  grant(requests()[0]->id, 7);
  client_.wait_for_lease(node_.clock().now() + 50ms);  // the answer is there: no waiting
  EXPECT_EQ(node_.clock().now(), start + 50ms);
  EXPECT_TRUE(client_.pump_lease(true, {}));
}

// A leaving worker hands its task back with the rows it trained and waits for the acknowledgement
// until its deadline, not past it; a lease of a task another holder handed back says where its
// order's training stands.
TEST_F(task_lease_client_test, a_hand_back_is_sent_and_awaited_until_the_deadline) {
  client_.hand_back(lease{7, 2, 70, 10}, 6);
  const auto start = node_.clock().now();
  EXPECT_FALSE(client_.settle_reports(start + 300ms));
  EXPECT_EQ(node_.clock().now(), start + 300ms);
  ASSERT_GE(reports().size(), 1u);
  auto r = reports()[0]->m.body().getTaskReport();
  EXPECT_EQ(r.getTaskId(), 7u);
  EXPECT_EQ(r.getAttempt(), 2u);
  ASSERT_EQ(r.which(), schema::TaskReport::LEFT);
  EXPECT_EQ(r.getLeft(), 6u);
  ack(reports().back()->id);
  EXPECT_TRUE(client_.settle_reports(node_.clock().now() + 300ms));
  EXPECT_EQ(client_.unacknowledged(), 0u);
  EXPECT_FALSE(client_.pump_lease(true, {}));
  rpc_.answer(requests().back()->id, [&](auto body) {
    auto l = body.initTaskLease();
    l.setLeaseMs(300);
    auto t = l.initTask();
    t.setId(7);
    t.setAttempt(3);
    t.setRecordCount(10);
    t.setTrained(6);
    t.setOrderAttempt(2);
    t.setTrainedStep(41);
  });
  auto a = client_.pump_lease(true, {});
  ASSERT_TRUE(a && a->what == kind::task);
  EXPECT_EQ(a->task.trained, 6u);
  EXPECT_EQ(a->task.order_attempt, 2u);
  EXPECT_EQ(a->task.trained_step, 41u);
}

}  // namespace
}  // namespace troupe::actors
