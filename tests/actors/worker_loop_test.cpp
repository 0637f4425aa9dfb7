// The worker's training loop (train_some) on a fake node, a fake rpc channel and a manual clock:
// it leases the next task while training the current one, and resends a task report until the
// dispenser acknowledges it. A fake strategy records the minibatches it is offered.
#include <gtest/gtest.h>

#include <limits>

#include <algorithm>
#include <chrono>

#include "fake_node.hpp"
#include "fake_rpc.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/data_model.hpp"
#include "worker/backends/native_backend.hpp"
#include "worker/worker_state.hpp"

namespace troupe::actors {
namespace {

using B = schema::Envelope::Body;
using namespace std::chrono_literals;
using testing::fake_node;
using testing::fake_rpc;

// Trains nothing: records each batch's records (their dense feature is the record index).
class recording_strategy final : public strategy {
 public:
  std::string_view name() const override { return "recording"; }
  bool steps_outlive_worker() const override { return outlive; }
  // A replica step of its own: 100 + the batches trained.
  std::uint64_t checkpointed_step(worker_context&) const override { return 100 + batches.size(); }
  // As local_sgd: its rows reach every replica at a round every `round_every` steps (0: at once).
  bool rows_settle_in_rounds() const override { return round_every > 0; }
  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    step_result r;
    // As local_sgd's first step on a fresh ring synchronised from another replica (replicas.cpp).
    if (std::exchange(overwrite, false) && ctx.replica_overwritten && ctx.replica_overwritten()) {
      ctx.offered_batch_stale = true;
      r.what = step_result::kind::retry;
      return r;
    }
    if (round_every > 0 && ++steps % round_every == 0) ++ctx.rounds_settled;
    // As a ring strategy's first step after a sync from no trained replica (replicas.cpp).
    if (auto s = std::exchange(restart, std::nullopt);
        s && ctx.replicas_restarted && ctx.replicas_restarted(*s)) {
      ctx.offered_batch_stale = true;
      r.what = step_result::kind::retry;
      return r;
    }
    if (!b) {
      ++idle_steps;
      r.what = exhausted ? step_result::kind::finished : step_result::kind::idle;
      return r;
    }
    std::vector<std::uint64_t> rows;
    for (std::size_t i = 0; i < b->size(); ++i)
      rows.push_back(static_cast<std::uint64_t>(b->dense_row(i)[0]));
    batches.push_back(std::move(rows));
    r.what = step_result::kind::trained;
    r.samples = b->size();
    r.loss = loss;
    return r;
  }
  double loss = 0.5;  // each step's
  std::vector<std::vector<std::uint64_t>> batches;
  std::size_t idle_steps = 0;
  bool outlive = false;  // steps_outlive_worker()
  // At the next step, the ring's replicas start again from their checkpoint of this step.
  std::optional<std::uint64_t> restart;
  std::size_t round_every = 0, steps = 0;
  bool overwrite = false;  // at the next step, a resync overwrites the replica
};

class no_ps final : public ps_client {
 public:
  expected<void> pull(trainer_backend&, const nn::batch&) override { return {}; }
  expected<void> push(trainer_backend&, std::size_t) override { return {}; }
};

class no_ring final : public ring_session {
 public:
  expected<info> ensure() override { return info{}; }
  expected<void> allreduce(std::span<float>) override { return {}; }
  expected<void> broadcast(std::span<float>, int) override { return {}; }
  void reset() override {}
};

class worker_loop_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::temp_dir("worker-loop-test");
    const auto& dir = dir_;
    nn::dataset d = testing::tiny_dataset();
    ASSERT_TRUE(job::write_dataset(d, dir + "/train", "test"));
    auto store = storage::record_store::open(dir + "/train");
    ASSERT_TRUE(store) << store.err().to_string();
    node_.spec().nn.train.batch_size = 2;
    auto m = job::build_model(node_.spec(), *store);
    st_.feed = std::make_unique<local_feed>(std::move(*store), dir + "/test");
    ASSERT_TRUE(m) << m.err().to_string();
    auto be = native_backend::create(std::move(*m), node_.spec().nn.train);
    ASSERT_TRUE(be) << be.err().to_string();
    st_.backend = std::move(*be);
    st_.node = &node_;
    st_.leases = std::make_unique<task_lease_client>(node_, rpc_);
    auto s = std::make_unique<recording_strategy>();
    strat_ = s.get();
    st_.strat = std::move(s);
    st_.ctx.reset(new worker_context{node_.spec(), node_.self(), *st_.backend, ps_, ring_});
    st_.ctx->replicas_restarted = [this](std::uint64_t step) { return forget_rows_kept_after(st_, step); };
    st_.ctx->replica_overwritten = [this] { return lose_unsettled_rows(st_); };
    st_.last_report = node_.clock().now();
  }

  void TearDown() override {
    st_.feed.reset();
    std::filesystem::remove_all(dir_);
  }

  // Answers lease request `id` with task `task` = records [first, first + count), leased for
  // `lease_ms` (0: no renewals).
  // A task another holder handed back: `trained` rows of the order of attempt 1 trained (applied at
  // replica step `trained_step`), leased as attempt 2.
  void lease(std::uint64_t id, std::uint64_t task, std::uint64_t first, std::uint64_t count,
             std::uint64_t lease_ms = 0, std::uint64_t trained = 0, std::uint64_t trained_step = 0) {
    rpc_.answer(id, [&](auto body) {
      auto l = body.initTaskLease();
      l.setLeaseMs(lease_ms);
      auto t = l.initTask();
      t.setId(task);
      t.setFirstRecord(first);
      t.setRecordCount(count);
      t.setAttempt(trained > 0 ? 2 : 1);
      t.setTrained(trained);
      t.setTrainedStep(trained_step);
      t.setOrderAttempt(1);
    });
  }
  void ack(std::uint64_t id, const std::string& error = "") {
    rpc_.answer(id, [&](auto body) { body.initTaskReportAck().setError(error); });
  }
  std::vector<std::uint64_t> holding(const fake_rpc::sent* s) const {
    std::vector<std::uint64_t> h;
    for (auto id : s->m.body().getTaskRequest().getHolding()) h.push_back(id);
    return h;
  }
  std::vector<const fake_rpc::sent*> lease_requests() const { return rpc_.of(B::TASK_REQUEST); }
  std::vector<const fake_rpc::sent*> reports() const { return rpc_.of(B::TASK_REPORT); }
  // Trains task `task` = records [first, first + count) to its end (one minibatch per pass), its
  // report sent: the state the report tests start from.
  std::uint64_t finish_one_task(std::uint64_t task, std::uint64_t first, std::uint64_t count);
  // The rows task 7 (10 records, its first 4 rows of attempt 1's order kept at `kept_step`) trains,
  // in order, when the ring's replicas start again from their checkpoint of step 120 at its first step.
  std::vector<std::uint64_t> rows_trained_after_a_restart(std::uint64_t kept_step);
  // Attempt 1's order of task 7's 10 rows, from `from` on.
  static std::vector<std::uint64_t> order_of_7(std::size_t from) {
    held_task order;
    order.id = 7;
    order.order_attempt = 1;
    order.rows.rows = 10;
    shuffle_rows(order);
    return {order.order.begin() + static_cast<std::ptrdiff_t>(from), order.order.end()};
  }

  std::string dir_;
  fake_node node_{node_identity{node_id{"worker-0", 1}, cluster::node_role::worker, 0, "", "job", "job", 0}};
  fake_rpc rpc_{node_.clock(), node_.self()};
  no_ps ps_;
  no_ring ring_;
  worker_state st_;
  recording_strategy* strat_ = nullptr;
};

std::uint64_t worker_loop_test::finish_one_task(std::uint64_t task, std::uint64_t first,
                                                std::uint64_t count) {
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(lease_requests().size(), 1u);
  lease(lease_requests().back()->id, task, first, count);
  while (reports().empty() && strat_->batches.size() < count) EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(reports().size(), 1u);
  return reports().empty() ? 0 : reports().back()->id;
}

std::vector<std::uint64_t> worker_loop_test::rows_trained_after_a_restart(std::uint64_t kept_step) {
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests()[0]->id, 7, 0, 10, 0, 4, kept_step);
  strat_->restart = 120;
  while (reports().empty()) EXPECT_TRUE(train_some(st_));
  std::vector<std::uint64_t> rows;
  for (const auto& b : strat_->batches) rows.insert(rows.end(), b.begin(), b.end());
  EXPECT_EQ(reports()[0]->m.body().getTaskReport().which(), schema::TaskReport::DONE);
  return rows;
}

TEST_F(worker_loop_test, leases_the_next_task_while_training_the_current_one) {
  EXPECT_TRUE(train_some(st_));  // no task: asks for one, holding nothing
  ASSERT_EQ(lease_requests().size(), 1u);
  EXPECT_TRUE(holding(lease_requests()[0]).empty());
  EXPECT_EQ(lease_requests()[0]->node, "master");
  EXPECT_EQ(lease_requests()[0]->to, "dispenser");
  lease(lease_requests()[0]->id, 7, 0, 10);  // 5 minibatches of 2
  // The first half trains without another request.
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(strat_->batches.size(), 3u);
  EXPECT_EQ(lease_requests().size(), 1u);
  // From the second half on, the next lease is asked for, naming the task it keeps.
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(lease_requests().size(), 2u);
  EXPECT_EQ(holding(lease_requests()[1]), std::vector<std::uint64_t>{7});
  EXPECT_EQ(strat_->batches.size(), 4u);
  lease(lease_requests()[1]->id, 9, 10, 10);
  // Task 7's last minibatch, then task 9's first at the very next pass: no pass without a batch.
  EXPECT_TRUE(train_some(st_));
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(strat_->batches.size(), 6u);
  EXPECT_EQ(strat_->idle_steps, 0u);
  std::vector<std::uint64_t> first_task;
  for (std::size_t i = 0; i < 5; ++i)
    first_task.insert(first_task.end(), strat_->batches[i].begin(), strat_->batches[i].end());
  std::sort(first_task.begin(), first_task.end());
  std::vector<std::uint64_t> rows_0_to_9{0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(first_task, rows_0_to_9);
  for (auto r : strat_->batches[5]) EXPECT_TRUE(r >= 10 && r < 20) << r;
  // Task 7's report went out when its last minibatch was trained; only two leases were asked for.
  ASSERT_EQ(reports().size(), 1u);
  auto rep = reports()[0]->m.body().getTaskReport();
  EXPECT_EQ(rep.getTaskId(), 7u);
  EXPECT_EQ(rep.getAttempt(), 1u);
  EXPECT_EQ(rep.which(), schema::TaskReport::DONE);
  EXPECT_EQ(lease_requests().size(), 2u);
}

// A worker that leaves (SIGTERM) takes no further step, even with a task and batches left: its ring
// is given up, and a strategy whose steps die with the worker (local_sgd's) hands nothing back: the
// master re-queues its tasks whole.
TEST_F(worker_loop_test, a_leaving_worker_takes_no_further_step) {
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(lease_requests().size(), 1u);
  lease(lease_requests()[0]->id, 7, 0, 10);
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(strat_->batches.size(), 1u);
  node_.leaving_flag = true;
  EXPECT_FALSE(train_some(st_));
  EXPECT_FALSE(train_some(st_));
  EXPECT_EQ(strat_->batches.size(), 1u);
  EXPECT_EQ(strat_->idle_steps, 0u);
  EXPECT_TRUE(reports().empty()) << "the task is not reported: the master re-queued it";
}

// A leaving worker whose steps outlive it (the ring's replicas, the PS shards) hands its task back
// with the rows it trained, and says it has nothing more to hand back (leave_job waits for that).
TEST_F(worker_loop_test, a_leaving_worker_hands_back_the_rows_it_trained) {
  strat_->outlive = true;
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests()[0]->id, 7, 0, 10);
  EXPECT_TRUE(train_some(st_));
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(strat_->batches.size(), 2u);
  node_.leaving_flag = true;
  EXPECT_FALSE(train_some(st_));
  EXPECT_EQ(strat_->batches.size(), 2u);
  // Unacknowledged (the fake dispenser answers nothing): resent once its request timed out, given up
  // 1.5 s on.
  ASSERT_EQ(reports().size(), 2u);
  for (const auto* sent : reports()) {
    auto rep = sent->m.body().getTaskReport();
    EXPECT_EQ(rep.getTaskId(), 7u);
    EXPECT_EQ(rep.getAttempt(), 1u);
    ASSERT_EQ(rep.which(), schema::TaskReport::LEFT);
    EXPECT_EQ(rep.getLeft(), 4u);
    EXPECT_EQ(rep.getStep(), 102u) << "the step that applied the rows it kept";
  }
  EXPECT_FALSE(node_.hand_back_pending_flag);
}

// A task whose first 4 rows a worker that left trained: the next holder trains the other 6 of the
// same order (attempt 1's, not its own lease's), each once.
TEST_F(worker_loop_test, a_handed_back_task_trains_the_rest_of_its_order) {
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests()[0]->id, 7, 0, 10, 0, 4);
  while (reports().empty()) ASSERT_TRUE(train_some(st_));
  std::vector<std::uint64_t> rows;
  for (const auto& b : strat_->batches) rows.insert(rows.end(), b.begin(), b.end());
  EXPECT_EQ(rows, order_of_7(4));
  EXPECT_EQ(reports()[0]->m.body().getTaskReport().which(), schema::TaskReport::DONE);
  EXPECT_EQ(reports()[0]->m.body().getTaskReport().getAttempt(), 2u);
  // With the step that applied its last rows (3 batches for its other 6 rows).
  EXPECT_EQ(reports()[0]->m.body().getTaskReport().getStep(), 103u);
}

// Every replica that had trained died, and the ring starts again from its checkpoint of step 120 as
// the worker takes its first step: the 4 rows of a task kept at step 150 were lost with the replicas
// (the master forgot them too: RingRestored), so the batch cut after them is not trained and the
// task trains all 10 rows of its order, each once. Before 2026-12-07 the worker skipped them: they
// were in no model.
TEST_F(worker_loop_test, rows_kept_after_the_step_a_restarted_ring_starts_from_are_trained) {
  EXPECT_EQ(rows_trained_after_a_restart(150), order_of_7(0));
}

// Rows kept at or before the checkpoint's step are in the restored replicas: still skipped.
TEST_F(worker_loop_test, rows_kept_before_the_step_a_restarted_ring_starts_from_are_not_trained_again) {
  EXPECT_EQ(rows_trained_after_a_restart(120), order_of_7(4));
}

// A step whose loss is not a number fails its task, saying the training diverged (the job used to
// finish "ok" with NaN weights); the loop goes on to its next task.
TEST_F(worker_loop_test, a_step_whose_loss_is_not_a_number_fails_its_task) {
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(lease_requests().size(), 1u);
  lease(lease_requests()[0]->id, 7, 0, 10);
  EXPECT_TRUE(train_some(st_));
  ASSERT_TRUE(reports().empty());
  strat_->loss = std::numeric_limits<double>::quiet_NaN();
  for (int pass = 0; pass < 3 && reports().empty(); ++pass) EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(reports().size(), 1u);
  auto rep = reports()[0]->m.body().getTaskReport();
  EXPECT_EQ(rep.getTaskId(), 7u);
  ASSERT_EQ(rep.which(), schema::TaskReport::FAILED);
  const std::string why = rep.getFailed().cStr();
  EXPECT_NE(why.find("training diverged: the loss of step 2 is NaN"), std::string::npos) << why;
  EXPECT_EQ(rep.getFailedAfter(), 0u) << "steps that do not outlive the worker keep no rows";
}

// A task whose step fails partway is reported with the rows trained before that step (the steps that
// outlive the worker's hold of it, as a leave's): its retry starts at the failing step.
TEST_F(worker_loop_test, a_task_that_fails_partway_reports_the_rows_trained_before_its_failing_step) {
  strat_->outlive = true;
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests()[0]->id, 7, 0, 10);
  EXPECT_TRUE(train_some(st_));
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(strat_->batches.size(), 2u);
  ASSERT_TRUE(reports().empty());
  strat_->loss = std::numeric_limits<double>::quiet_NaN();
  for (int pass = 0; pass < 3 && reports().empty(); ++pass) EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(reports().size(), 1u);
  auto rep = reports()[0]->m.body().getTaskReport();
  ASSERT_EQ(rep.which(), schema::TaskReport::FAILED);
  EXPECT_EQ(rep.getFailedAfter(), 4u) << "2 steps of 2 rows before the one that failed";
  EXPECT_EQ(rep.getStep(), 100u + strat_->batches.size()) << "the strategy's step as it reported";
}

TEST_F(worker_loop_test, held_leases_are_renewed_every_third_of_the_lease_time) {
  auto renewals = [&] {
    std::vector<std::vector<std::uint64_t>> r;
    for (auto& s : node_.take())
      if (s.m.kind() == B::TASK_RENEW) {
        EXPECT_EQ(s.to, "dispenser");
        std::vector<std::uint64_t> ids;
        for (auto l : s.m.body().getTaskRenew().getLeases()) ids.push_back(l.getTaskId());
        r.push_back(std::move(ids));
      }
    return r;
  };
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests().back()->id, 7, 0, 40, 300);  // 20 minibatches, a lease of 300 ms
  EXPECT_TRUE(train_some(st_));
  auto leased_at = node_.clock().now();
  node_.manual().advance(99ms);
  EXPECT_TRUE(train_some(st_));
  EXPECT_TRUE(renewals().empty());
  node_.manual().advance(1ms);
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(renewals(), std::vector<std::vector<std::uint64_t>>{{7}});
  EXPECT_TRUE(train_some(st_));
  EXPECT_TRUE(renewals().empty());  // not again before another third
  node_.manual().advance(100ms);
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(renewals().size(), 1u);
  EXPECT_GE(node_.clock().now(), leased_at + 200ms);
}

TEST_F(worker_loop_test, a_report_is_resent_until_acknowledged) {
  auto first = finish_one_task(7, 0, 2);
  ASSERT_NE(first, 0u);
  // The dispenser's node went down before answering: the report goes out again at once.
  rpc_.fail(first);
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(reports().size(), 2u);
  EXPECT_EQ(reports()[1]->m.body().getTaskReport().getTaskId(), 7u);
  // While it is unacknowledged the worker still counts the task as held.
  EXPECT_TRUE(train_some(st_));
  ASSERT_FALSE(lease_requests().empty());
  auto h = holding(lease_requests().back());
  EXPECT_NE(std::find(h.begin(), h.end(), 7u), h.end());
  // Acknowledged: forgotten, never sent again.
  ack(reports()[1]->id);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(train_some(st_));
  node_.manual().advance(5s);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(reports().size(), 2u);
  EXPECT_EQ(st_.leases->unacknowledged(), 0u);
}

TEST_F(worker_loop_test, a_report_whose_ack_never_comes_is_resent_after_the_timeout) {
  auto first = finish_one_task(7, 0, 2);
  ASSERT_NE(first, 0u);
  auto sent_at = reports()[0]->at;
  // No answer: passes go by (each idle pass waits a little on the manual clock), no resend.
  while (node_.clock().now() < sent_at + 990ms) {
    EXPECT_TRUE(train_some(st_));
    ASSERT_EQ(reports().size(), 1u);
  }
  ASSERT_TRUE(rpc_.pending(first));
  node_.manual().advance(10ms);
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(reports().size(), 2u);
  EXPECT_FALSE(rpc_.pending(first));
  EXPECT_EQ(reports()[1]->m.body().getTaskReport().getTaskId(), 7u);
  // A refusal (a stale lease) is an acknowledgement too: the worker forgets the report.
  ack(reports()[1]->id, "stale attempt");
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(st_.leases->unacknowledged(), 0u);
}

TEST_F(worker_loop_test, an_unreachable_master_gets_the_report_after_a_pause) {
  auto first = finish_one_task(7, 0, 2);
  ASSERT_NE(first, 0u);
  rpc_.reachable = false;
  rpc_.fail(first);
  auto failed_at = node_.clock().now();
  EXPECT_TRUE(train_some(st_));  // the resend fails: retried after 100 ms, not at every pass
  EXPECT_EQ(rpc_.attempts[B::TASK_REPORT], 2u);
  while (node_.clock().now() < failed_at + 95ms) EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(rpc_.attempts[B::TASK_REPORT], 2u);
  EXPECT_EQ(reports().size(), 1u);
  rpc_.reachable = true;
  node_.manual().advance(20ms);
  EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(reports().size(), 2u);
  ack(reports()[1]->id);
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(st_.leases->unacknowledged(), 0u);
}

TEST_F(worker_loop_test, a_worker_without_a_task_waits_for_the_lease_reply_not_a_nap) {
  auto start = node_.clock().now();
  EXPECT_TRUE(train_some(st_));  // asks, then waits for the reply: none comes within the pass's limit
  ASSERT_EQ(lease_requests().size(), 1u);
  EXPECT_EQ(rpc_.waits, 1u);
  EXPECT_EQ(node_.clock().now(), start + tick_budget);
  // The reply is there: the next pass takes it and trains without waiting.
  lease(lease_requests()[0]->id, 7, 0, 10);
  auto answered = node_.clock().now();
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(strat_->batches.size(), 1u);
  EXPECT_EQ(rpc_.waits, 1u);
  EXPECT_EQ(node_.clock().now(), answered);
}

TEST_F(worker_loop_test, after_no_task_was_left_the_loop_waits_until_it_asks_again) {
  EXPECT_TRUE(train_some(st_));
  rpc_.answer(lease_requests()[0]->id, [](auto body) { body.initTaskLease().setNone(); });
  // The answer is taken, the strategy has no batch: the pass waits (for a ring change, else) until
  // the next request is due, 20 ms on, not a nap per pass.
  auto answered = node_.clock().now();
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(node_.ring_waits, 1u);
  EXPECT_EQ(node_.clock().now(), answered + 20ms);
  EXPECT_EQ(lease_requests().size(), 1u);
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(lease_requests().size(), 2u);
}

// local_sgd: a replica's rows reach the others at its next averaging round. A task trained to its
// end before it is reported done only after that round, and named as held meanwhile (renewed, not
// re-queued). Before 2026-12-07 it was reported at once: a worker that died before the round left it
// done with its rows in no model.
TEST_F(worker_loop_test, a_task_trained_to_its_end_is_reported_once_its_rows_are_averaged) {
  strat_->round_every = 10;
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests()[0]->id, 7, 0, 6);  // 3 minibatches of 2
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(strat_->batches.size(), 3u);
  EXPECT_TRUE(reports().empty()) << "reported before its rows were averaged";
  ASSERT_EQ(lease_requests().size(), 2u);
  rpc_.answer(lease_requests()[1]->id, [](auto body) { body.initTaskLease().setNone(); });
  while (reports().empty() && strat_->steps < 20) {
    node_.manual().advance(20ms);  // an idle pass waits for nothing (the round paces it)
    EXPECT_TRUE(train_some(st_));
    if (reports().empty()) {
      auto h = holding(lease_requests().back());
      EXPECT_NE(std::find(h.begin(), h.end(), 7u), h.end()) << "an unsettled task is held";
    }
  }
  EXPECT_EQ(strat_->steps, 10u) << "reported after the round, not before or later";
  EXPECT_GE(lease_requests().size(), 3u);
  ASSERT_EQ(reports().size(), 1u);
  auto rep = reports()[0]->m.body().getTaskReport();
  EXPECT_EQ(rep.getTaskId(), 7u);
  EXPECT_EQ(rep.which(), schema::TaskReport::DONE);
  EXPECT_TRUE(st_.unsettled.empty());
}

// A resync overwrites the replica before its round (it was not the most trained of a new ring): the
// task trained to its end since the last round goes back whole, saying why, and the task it trains
// goes back to where the round found it: the batch offered is not trained, its rows are trained again.
TEST_F(worker_loop_test, a_replica_overwritten_before_its_round_gives_back_what_it_lost) {
  strat_->round_every = 100;
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests()[0]->id, 7, 0, 6);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(lease_requests().size(), 2u);
  lease(lease_requests()[1]->id, 9, 10, 10);  // 5 minibatches
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(train_some(st_));
  ASSERT_EQ(strat_->batches.size(), 5u);
  ASSERT_TRUE(st_.task && st_.task->id == 9u && st_.task->cursor == 4u);
  EXPECT_TRUE(reports().empty());
  strat_->overwrite = true;
  EXPECT_TRUE(train_some(st_));
  EXPECT_EQ(strat_->batches.size(), 5u) << "the stale batch was trained";
  EXPECT_TRUE(train_some(st_));  // sends the hand-back, trains task 9's first batch again
  ASSERT_EQ(reports().size(), 1u);
  auto rep = reports()[0]->m.body().getTaskReport();
  EXPECT_EQ(rep.getTaskId(), 7u);
  ASSERT_EQ(rep.which(), schema::TaskReport::LEFT);
  EXPECT_EQ(rep.getLeft(), 0u);
  EXPECT_NE(std::string(rep.getGivenBack().cStr()).find("lost before they were averaged"), std::string::npos);
  while (strat_->batches.size() < 10) EXPECT_TRUE(train_some(st_));
  std::vector<std::uint64_t> task_9;
  for (std::size_t i = 5; i < 10; ++i)
    task_9.insert(task_9.end(), strat_->batches[i].begin(), strat_->batches[i].end());
  std::sort(task_9.begin(), task_9.end());
  EXPECT_EQ(task_9, (std::vector<std::uint64_t>{10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
}

// A leaving worker gives back the tasks whose rows were not averaged yet (a hand-back of 0 rows), so
// the master trains them again at once.
TEST_F(worker_loop_test, a_leaving_worker_gives_back_the_tasks_its_round_has_not_averaged) {
  strat_->round_every = 100;
  EXPECT_TRUE(train_some(st_));
  lease(lease_requests()[0]->id, 7, 0, 6);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(train_some(st_));
  EXPECT_TRUE(reports().empty());
  node_.leaving_flag = true;
  EXPECT_FALSE(train_some(st_));
  ASSERT_FALSE(reports().empty());
  auto rep = reports()[0]->m.body().getTaskReport();
  EXPECT_EQ(rep.getTaskId(), 7u);
  ASSERT_EQ(rep.which(), schema::TaskReport::LEFT);
  EXPECT_EQ(rep.getLeft(), 0u);
  EXPECT_EQ(std::string(rep.getGivenBack().cStr()), "");
}

}  // namespace
}  // namespace troupe::actors
