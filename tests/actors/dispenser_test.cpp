// The dispenser's behaviour (task_dispenser) on a fake node and a manual clock: leases, expiry,
// stale reports, quarantine. No sockets, no sleeps, no actor system.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <map>

#include <capnp/any.h>

#include "dispenser_fixture.hpp"
#include "journal_ops.hpp"
#include "troupe/observe/job_events.hpp"

namespace troupe::actors {
namespace {

TEST_F(dispenser_test, hands_out_distinct_leases_stamped_from_the_clock) {
  node_->manual().advance(std::chrono::seconds(5));
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  EXPECT_EQ(a.attempt, 1u);
  EXPECT_EQ(a.lease_ms, 1000u);
  EXPECT_EQ(storage::testing::get(disp_->journal(), a.id)->deadline_ms, node_->clock().wall_ms() + 1000);
  auto b = request(w0, {a.id});  // leased ahead: it keeps the first
  ASSERT_TRUE(b.task);
  EXPECT_NE(a.id, b.id);
  auto c = request(w1);
  ASSERT_TRUE(c.task);
  EXPECT_NE(c.id, a.id);
  EXPECT_NE(c.id, b.id);
  EXPECT_EQ(counts().doing, 3u);
  EXPECT_EQ(counts().todo, 1u);
  EXPECT_EQ(disp_->counts()->requeued, 0u);  // nothing requeued
}

TEST_F(dispenser_test, a_lease_the_worker_no_longer_names_goes_back_to_todo) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  auto b = request(w0);  // holding nothing: the first lease was lost on its side
  ASSERT_TRUE(b.task);
  EXPECT_EQ(counts().doing, 1u);
  EXPECT_EQ(disp_->counts()->requeued, 1u);
}

// A request naming the leases it keeps, while the worker lost another: the requeue and the lease
// are one journal write transaction (one commit), not two.
TEST_F(dispenser_test, a_lease_request_is_one_journal_write) {
  auto a = request(w0);
  auto lost = request(w0, {a.id});
  ASSERT_TRUE(a.task && lost.task);
  auto before = disp_->journal().write_transactions();
  auto b = request(w0, {a.id});
  ASSERT_TRUE(b.task);
  EXPECT_EQ(b.id, lost.id) << "the requeued lease is the lowest todo task";
  EXPECT_EQ(b.attempt, 2u);
  EXPECT_EQ(disp_->journal().write_transactions() - before, 1u);
  EXPECT_EQ(disp_->counts()->requeued, 1u);
}

// Reports and requests that queued up while the previous batch committed: one write transaction
// for all, and each sender gets its own answer (by correlation id); a refused report is refused
// alone; a departed holder hears none.
TEST_F(dispenser_test, queued_reports_and_requests_share_one_commit) {
  const node_id w2{"worker-2", 1}, gone{"worker-3", 1};
  auto held = request(w1);
  ASSERT_TRUE(held.task);
  disp_->requeue_holder(gone.to_string());
  std::vector<message> batch;
  auto report_of = [&](const node_id& w, std::uint64_t id, std::uint32_t attempt) {
    return incoming(
        w, "rpc", "dispenser",
        [&](auto body) {
          auto r = body.initTaskReport();
          r.setTaskId(id);
          r.setAttempt(attempt);
          r.setDone();
        },
        ++correlation_);
  };
  auto ask = [&](const node_id& w) {
    return incoming(
        w, "rpc", "dispenser", [](auto body) { body.initTaskRequest(); }, ++correlation_);
  };
  const std::uint64_t first = correlation_ + 1;
  batch.push_back(report_of(w1, held.id, held.attempt));
  batch.push_back(ask(w0));
  batch.push_back(ask(gone));
  batch.push_back(ask(w2));
  batch.push_back(report_of(w2, held.id, held.attempt));  // not its lease: refused
  batch.push_back(ask(w0));  // keeps nothing: its first lease goes back and out again to it
  auto before = disp_->journal().write_transactions();
  disp_->on_messages(batch);
  EXPECT_EQ(disp_->journal().write_transactions() - before, 1u);
  auto out = node_->take();
  ASSERT_EQ(out.size(), batch.size());
  std::map<std::uint64_t, const fake_node::sent*> by_cid;
  for (const auto& o : out) by_cid[o.m.envelope().getCorrelationId()] = &o;
  ASSERT_EQ(by_cid.size(), batch.size());
  EXPECT_EQ(std::string(by_cid.at(first)->m.body().getTaskReportAck().getError().cStr()), "");
  EXPECT_EQ(by_cid.at(first + 2)->m.body().getTaskLease().which(), schema::TaskLease::NONE);
  EXPECT_EQ(by_cid.at(first + 3)->m.body().getTaskLease().which(), schema::TaskLease::TASK);
  EXPECT_NE(std::string(by_cid.at(first + 4)->m.body().getTaskReportAck().getError().cStr()), "");
  EXPECT_EQ(by_cid.at(first + 5)->m.body().getTaskLease().which(), schema::TaskLease::TASK);
  EXPECT_EQ(counts().done, 1u);
  EXPECT_EQ(counts().doing, 2u);  // w0's and w2's
  EXPECT_EQ(disp_->counts()->requeued, 1u);
}

TEST_F(dispenser_test, an_expired_lease_is_requeued_only_after_its_deadline) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  node_->manual().advance(std::chrono::milliseconds(999));
  disp_->requeue_expired();
  EXPECT_EQ(counts().doing, 1u);
  node_->manual().advance(std::chrono::milliseconds(2));
  disp_->requeue_expired();
  EXPECT_EQ(counts().doing, 0u);
  EXPECT_EQ(counts().todo, 4u);
  EXPECT_EQ(disp_->counts()->requeued, 1u);
  // The task goes out again, under a new attempt.
  std::vector<std::uint64_t> held;
  EXPECT_EQ(lease_until(w1, a.id, held), 2u);
}

TEST_F(dispenser_test, a_renewed_lease_runs_a_lease_timeout_from_its_renewal) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  auto renew = [&](const node_id& who, std::uint32_t attempt) {
    disp_->on_message(incoming(who, "worker", "dispenser", [&](auto body) {
      auto l = body.initTaskRenew().initLeases(1);
      l[0].setTaskId(a.id);
      l[0].setAttempt(attempt);
    }));
    EXPECT_TRUE(node_->take().empty());  // one-way
  };
  node_->manual().advance(std::chrono::milliseconds(900));
  renew(w0, a.attempt);
  renew(w1, a.attempt);      // not the holder: changes nothing
  renew(w0, a.attempt + 1);  // not its attempt: changes nothing
  node_->manual().advance(std::chrono::milliseconds(900));
  disp_->requeue_expired();
  EXPECT_EQ(counts().doing, 1u);
  node_->manual().advance(std::chrono::milliseconds(101));
  disp_->requeue_expired();
  EXPECT_EQ(counts().doing, 0u);
}

// A worker in a long step renews from a thread that cannot name the lease whose reply came during
// the step (unread yet): the lease granted to it last is renewed with its renewals (it expired, and
// its rows were trained twice); once reported, it is not.
TEST_F(dispenser_test, the_lease_granted_last_is_renewed_with_the_holders_renewals) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  std::vector<std::uint64_t> held{a.id};
  auto b = request(w0, held);  // leased ahead: its reply unread by the worker
  ASSERT_TRUE(b.task);
  ASSERT_NE(b.id, a.id);
  auto renew_a = [&] {
    disp_->on_message(incoming(w0, "worker", "dispenser", [&](auto body) {
      auto l = body.initTaskRenew().initLeases(1);
      l[0].setTaskId(a.id);
      l[0].setAttempt(a.attempt);
    }));
  };
  node_->manual().advance(std::chrono::milliseconds(900));
  renew_a();
  node_->manual().advance(std::chrono::milliseconds(900));
  disp_->requeue_expired();
  EXPECT_EQ(counts().doing, 2u) << "the lease granted last expired under its holder's renewals";
  EXPECT_EQ(disp_->counts()->requeued, 0u);
}

TEST_F(dispenser_test, a_report_of_an_old_attempt_is_refused) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  node_->manual().advance(std::chrono::milliseconds(1001));
  disp_->requeue_expired();
  std::vector<std::uint64_t> held;
  auto attempt = lease_until(w1, a.id, held);
  ASSERT_EQ(attempt, 2u);
  EXPECT_NE(report(w0, a.id, a.attempt), "");  // stale: the lease is w1's now
  EXPECT_EQ(counts().done, 0u);
  EXPECT_EQ(report(w1, a.id, attempt), "");
  EXPECT_EQ(counts().done, 1u);
}

// A report of an outcome this master cannot read (a newer peer's union member, a damaged frame) is
// dropped: the task stays leased (it was taken as done, its rows never trained). A report it reads
// is taken after it.
TEST_F(dispenser_test, a_report_of_an_unknown_kind_is_not_a_task_done) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  disp_->on_message(incoming(
      w0, "rpc", "dispenser",
      [&](auto body) {
        auto r = body.initTaskReport();
        r.setTaskId(a.id);
        r.setAttempt(a.attempt);
        r.setDone();
        // The union's discriminant (the data section's third u16, after taskId) set past LEFT.
        capnp::AnyStruct::Builder any(kj::mv(r));
        any.getDataSection()[8] = 7;
      },
      99));
  EXPECT_TRUE(node_->take().empty()) << "no ack: nothing was taken";
  EXPECT_EQ(counts().done, 0u);
  EXPECT_EQ(counts().doing, 1u);
  EXPECT_EQ(report(w0, a.id, a.attempt), "");
  EXPECT_EQ(counts().done, 1u);
}

TEST_F(dispenser_test, a_report_from_a_departed_incarnation_is_refused) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  disp_->requeue_holder(w0.to_string());  // the master saw worker-0#1 die
  EXPECT_EQ(counts().doing, 0u);
  const node_id w0_next{"worker-0", 2};
  std::vector<std::uint64_t> held;
  auto attempt = lease_until(w0_next, a.id, held);
  ASSERT_EQ(attempt, 2u);
  // Even quoting the current attempt, the old incarnation is not the holder.
  EXPECT_NE(report(w0, a.id, attempt), "");
  EXPECT_EQ(report(w0_next, a.id, attempt), "");
  EXPECT_EQ(counts().done, 1u);
}

TEST_F(dispenser_test, an_incarnation_that_left_gets_no_further_lease) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  disp_->requeue_holder(w0.to_string());  // it left on SIGTERM (or died): its leases went back
  auto late = request(w0);                // a request it sent while shutting down
  EXPECT_TRUE(late.none);
  EXPECT_EQ(counts().doing, 0u);
  EXPECT_TRUE(request(node_id{"worker-0", 2}).task);  // its next incarnation is a new holder
}

TEST_F(dispenser_test, requeue_absent_returns_only_non_members_tasks) {
  auto a = request(w0);
  auto b = request(w1);
  ASSERT_TRUE(a.task && b.task);
  disp_->requeue_absent({w1.to_string()});
  auto doing = disp_->journal().list(storage::task_state::doing);
  ASSERT_TRUE(doing);
  ASSERT_EQ(doing->size(), 1u);
  EXPECT_EQ(doing->front().holder, w1.to_string());
}

TEST_F(dispenser_test, a_task_that_keeps_failing_is_quarantined) {
  // max_task_failures = 2: the first failure re-queues it, the second quarantines it.
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;
  {
    auto a = request(w0);
    ASSERT_TRUE(a.task);
    id = a.id;
    EXPECT_EQ(report(w0, a.id, a.attempt, "bad record"), "");
  }
  EXPECT_EQ(storage::testing::get(disp_->journal(), id)->state, storage::task_state::todo);
  // The failure tried again is in the timeline (it left no trace: no requeue, no event).
  {
    std::ifstream events(dir_ + "/" + observe::events_file_name);
    std::string all((std::istreambuf_iterator<char>(events)), std::istreambuf_iterator<char>());
    EXPECT_NE(all.find("failed (tried again): bad record"), std::string::npos) << all;
  }
  std::vector<std::uint64_t> held;
  attempt = lease_until(w1, id, held);
  ASSERT_EQ(attempt, 2u);
  EXPECT_EQ(report(w1, id, attempt, "bad record"), "");
  EXPECT_EQ(storage::testing::get(disp_->journal(), id)->state, storage::task_state::failed);
  EXPECT_EQ(counts().failed, 1u);
  // It is never handed out again: the other three finish the dataset.
  held.erase(std::find(held.begin(), held.end(), id));
  for (auto t : held) EXPECT_EQ(report(w1, t, storage::testing::get(disp_->journal(), t)->attempt), "");
  for (int i = 0; i < 4; ++i) {
    auto r = request(w1);
    if (!r.task) break;
    EXPECT_NE(r.id, id);
    EXPECT_EQ(report(w1, r.id, r.attempt), "");
  }
  auto last = request(w1);
  EXPECT_TRUE(last.finished);
  EXPECT_EQ(counts().done, 3u);
}

// A failure report names the rows its holder trained before the step that failed: they are kept
// (the retry starts at that step), and the timeline says so.
TEST_F(dispenser_test, a_failure_keeps_the_rows_trained_before_the_failing_step) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  EXPECT_EQ(report(w0, a.id, a.attempt, "a step failed", 4), "");
  auto t = storage::testing::get(disp_->journal(), a.id);
  EXPECT_EQ(t->state, storage::task_state::todo);
  EXPECT_EQ(t->trained, 4u);
  EXPECT_EQ(t->order_attempt, a.attempt);
  std::ifstream events(dir_ + "/" + observe::events_file_name);
  std::string all((std::istreambuf_iterator<char>(events)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("failed (tried again from its failing step, 4 rows trained kept): a step failed"),
            std::string::npos)
      << all;
}

// The replica step a report names (the step that applied the task's last rows, allreduce's) is the
// journal's: a job resumed from an earlier checkpoint trains the task again.
TEST_F(dispenser_test, a_report_keeps_the_step_that_applied_its_rows) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  EXPECT_EQ(report(w0, a.id, a.attempt, "", 0, 321), "");
  EXPECT_EQ(storage::testing::get(disp_->journal(), a.id)->step, 321u);
  auto b = request(w0);
  ASSERT_TRUE(b.task);
  EXPECT_EQ(report(w0, b.id, b.attempt, "a step failed", 4, 333), "");
  EXPECT_EQ(storage::testing::get(disp_->journal(), b.id)->step, 333u);
  EXPECT_EQ(storage::testing::get(disp_->journal(), b.id)->trained, 4u);
  // Its next lease carries the kept rows with their step: a worker whose ring starts again from an
  // earlier checkpoint trains them again (Task.trainedStep).
  for (int i = 0; i < 8; ++i) {
    auto n = request(w1);
    ASSERT_TRUE(n.task);
    if (n.id != b.id) continue;
    EXPECT_EQ(n.trained, 4u);
    EXPECT_EQ(n.trained_step, 333u);
    return;
  }
  ADD_FAILURE() << "task " << b.id << " was not leased again";
}

// Every replica died and the ring starts again from its checkpoint of step 330: the task done at
// step 333 and the rows kept at step 333 are in no model (trained again), the task done at step 321
// is in the checkpoint (stays done); the log's timeline says so.
TEST_F(dispenser_test, a_ring_restored_from_its_checkpoint_trains_again_what_later_steps_applied) {
  auto a = request(w0);
  auto b = request(w0, {a.id});
  auto c = request(w1);
  ASSERT_TRUE(a.task && b.task && c.task);
  EXPECT_EQ(report(w0, a.id, a.attempt, "", 0, 321), "");
  EXPECT_EQ(report(w0, b.id, b.attempt, "", 0, 333), "");
  EXPECT_EQ(report(w1, c.id, c.attempt, "a step failed", 4, 333), "");
  auto r = disp_->ring_restored(330);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->done, 1u);
  EXPECT_EQ(r->trained, 1u);
  const auto& j = disp_->journal();
  EXPECT_EQ(storage::testing::get(j, a.id)->state, storage::task_state::done);
  EXPECT_EQ(storage::testing::get(j, b.id)->state, storage::task_state::todo);
  EXPECT_EQ(storage::testing::get(j, c.id)->trained, 0u);
  std::ifstream events(dir_ + "/" + observe::events_file_name);
  std::string all((std::istreambuf_iterator<char>(events)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("ring restored from its checkpoint of step 330: 1 DONE task(s) are trained again, and 1 "
                     "partly trained task(s) from their first row"),
            std::string::npos)
      << all;
  r = disp_->ring_restored(330);  // said again (a resumed job's runner did it first): nothing more
  ASSERT_TRUE(r);
  EXPECT_EQ(r->done + r->trained, 0u);
}

// A ring that had no checkpoint starts again from its initial weights (step 0): every task done and
// every row kept at a step is trained again. A job's first ring says the same and finds nothing.
TEST_F(dispenser_test, a_ring_restarted_without_a_checkpoint_trains_again_every_task_done) {
  auto r = disp_->ring_restored(0);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->done + r->trained, 0u);
  auto a = request(w0);
  auto b = request(w1);
  ASSERT_TRUE(a.task && b.task);
  EXPECT_EQ(report(w0, a.id, a.attempt, "", 0, 2), "");
  EXPECT_EQ(report(w1, b.id, b.attempt, "a step failed", 4, 1), "");
  r = disp_->ring_restored(0);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->done, 1u);
  EXPECT_EQ(r->trained, 1u);
  EXPECT_EQ(storage::testing::get(disp_->journal(), a.id)->state, storage::task_state::todo);
  std::ifstream events(dir_ + "/" + observe::events_file_name);
  std::string all((std::istreambuf_iterator<char>(events)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("ring restored from its initial weights (no checkpoint yet: job.checkpoint_every_ms = " +
                     std::to_string(node_->spec().job.checkpoint_every.count()) + "): 1 DONE task(s)"),
            std::string::npos)
      << all;
}

TEST_F(dispenser_test, a_send_failure_is_not_a_crash) {
  node_->connected = false;
  disp_->on_message(incoming(w0, "rpc", "dispenser", [](auto body) { body.initTaskRequest(); }));
  EXPECT_TRUE(node_->take().empty());
  EXPECT_EQ(counts().doing, 1u);  // leased: the worker's next request (holding nothing) returns it
}

TEST_F(dispenser_test, a_disk_fault_of_the_master_pauses_leases_until_it_is_over) {
  disp_->set_external_fault("cluster: I/O error: no space left on device: /j/counters.json.tmp (write)");
  auto paused = request(w0);
  EXPECT_TRUE(paused.none);
  EXPECT_EQ(counts().doing, 0u);
  // The counts carry the journal's own fault only: the master names the faults it told of itself.
  EXPECT_TRUE(disp_->counts()->fault.empty());
  disp_->set_external_fault("");
  EXPECT_TRUE(request(w0).task);
  EXPECT_TRUE(disp_->counts()->fault.empty());
}

TEST_F(dispenser_test, requeues_and_done_records_are_counted_in_the_journal) {
  auto a = request(w0);
  ASSERT_TRUE(a.task);
  disp_->requeue_holder(w0.to_string());
  auto b = request(w1);
  ASSERT_TRUE(b.task);
  EXPECT_EQ(report(w1, b.id, b.attempt), "");
  auto c = disp_->counts();
  EXPECT_EQ(c->requeued, 1u);
  EXPECT_EQ(c->records_done, storage::testing::get(disp_->journal(), b.id)->count);
  EXPECT_EQ(counts().requeued, 1u) << "durable: the journal's own counter";
}

}  // namespace
}  // namespace troupe::actors
