// The master actor on a fake node_context and CAF's deterministic test coordinator: admission,
// exit notices from the runner and from ring neighbours (checked against liveness), re-queues to
// the dispenser, status replies paired by correlation id, evaluation then completion, and the
// counters' rates and save interval on the node's manual clock. No
// sockets, no sleeps: the test runs every message itself and moves both clocks by hand.
#include <gtest/gtest.h>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "caf_types.hpp"
#include "fake_node.hpp"
#include "roles.hpp"
#include "troupe/supervision/name_registry.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::actors {
namespace {

using testing::fake_node;
using testing::incoming;

// What the stand-in dispenser was told, and the counts it answers with.
struct dispenser_log {
  std::vector<std::string> requeued;                 // single dead holders
  std::vector<std::vector<std::uint64_t>> kept;      // the rows each one's task keeps (empty: none)
  std::vector<std::vector<std::string>> reconciled;  // alive-holder lists
  wire::task_counts counts;
};

caf::behavior fake_dispenser(caf::event_based_actor*, std::shared_ptr<dispenser_log> log) {
  return {
      [=](requeue_atom, const std::string& id, const std::vector<std::uint64_t>& kept) {
        log->requeued.push_back(id);
        log->kept.push_back(kept);
      },
      [=](requeue_atom, const std::vector<std::string>& alive) { log->reconciled.push_back(alive); },
      [=](counts_atom) { return log->counts; },
  };
}

caf::actor_system_config& testing_config() {
  static caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  return cfg;
}

class master_test : public ::testing::Test {
 protected:
  master_test()
      : sys_(testing_config()), sched_(dynamic_cast<caf::scheduler::test_coordinator&>(sys_.scheduler())) {}

  void SetUp() override {
    dir_ = testing::temp_dir("master-test");
    node_identity who;
    who.id = node_id{"master", 1};
    who.role = cluster::node_role::master;
    who.job_dir = dir_;
    who.job_id = "job-m";
    node_.emplace(who);
    node_->spec().job.min_workers = 1;
    node_->spec().job.max_workers = 4;
    log_ = std::make_shared<dispenser_log>();
    dispenser_ = sys_.spawn(fake_dispenser, log_);
    names_.put("dispenser", dispenser_);
    master_ = spawn_master(sys_, *node_, names_, 0);
    sched_.run();  // the first tick
    node_->take();
  }
  void TearDown() override {
    caf::anon_send_exit(master_, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(dispenser_, caf::exit_reason::user_shutdown);
    sched_.run();
    std::filesystem::remove_all(dir_);
  }

  void deliver(message m) {
    caf::anon_send(master_, std::move(m));
    sched_.run();
  }
  void join(const node_id& id, const node_id& sender, cluster::node_role role = cluster::node_role::worker) {
    deliver(incoming(sender, "node", "master", [&](auto body) {
      auto j = body.initJoin();
      wire::write_node(j.initNode(), id);
      j.setAddress("127.0.0.1:" + std::to_string(2000 + id.incarnation));
      j.setRole(std::string(cluster::to_string(role)));
      j.setPid(4242);
      j.setRingAddress("127.0.0.1:" + std::to_string(3000 + id.incarnation));
    }));
  }
  void exited(const node_id& id, const node_id& reporter) {
    deliver(incoming(reporter, "runner", "master", [&](auto body) {
      auto n = body.initJob().initNodeExited();
      wire::write_node(n.initNode(), id);
      n.setStatus("killed by SIGKILL");
    }));
  }
  // One master tick (its 100 ms timer) with the node's clock moved by `dt`.
  void tick(std::chrono::milliseconds dt = std::chrono::milliseconds(100)) {
    node_->manual().advance(dt);
    sched_.trigger_timeouts();
    sched_.run();
  }
  // The membership messages sent since the last call, by receiving node.
  std::map<std::string, wire::membership_msg> published() {
    std::map<std::string, wire::membership_msg> out;
    for (auto& s : node_->take()) {
      if (s.m.kind() != schema::Envelope::Body::MEMBERSHIP) continue;
      EXPECT_EQ(s.to, "node");
      auto msg = wire::read_membership(s.m.body().getMembership());
      if (msg.delta()) msg.view = node_->held_views[s.node];  // the view the delta makes (the node's last)
      out[s.node] = std::move(msg);
    }
    EXPECT_EQ(node_->views_missed, 0u) << "a delta went to a node that did not hold its base view";
    return out;
  }
  // `task`: {task id, attempt, rows trained, step} of WorkerProgress.task (empty: none).
  void progress(const node_id& from, std::uint64_t samples, std::uint64_t steps,
                std::uint64_t replica_step = 0, std::vector<std::uint64_t> task = {}) {
    deliver(incoming(from, "worker", "master", [&](auto body) {
      auto p = body.initJob().initWorkerProgress();
      p.setSamples(samples);
      p.setSteps(steps);
      p.setLossSum(0.5 * static_cast<double>(steps));
      p.setReplicaStep(replica_step);
      if (task.size() == 4) {
        auto t = p.initTask();
        t.setTaskId(task[0]);
        t.setAttempt(static_cast<std::uint32_t>(task[1]));
        t.setTrained(task[2]);
        t.setStep(task[3]);
      }
    }));
  }
  // A PS shard's answer to the master's FinalCheckpoint: `error` empty, `version` holds its pushes.
  void final_checkpoint_reply(const node_id& shard, std::uint64_t version, const std::string& error = "",
                              bool disk_fault = false) {
    deliver(incoming(shard, "ps", "master", [&](auto body) {
      auto r = body.initJob().initFinalCheckpointReply();
      r.setVersion(version);
      r.setError(error);
      r.setDiskFault(disk_fault);
    }));
  }
  wire::job_status status() {
    node_->take();
    deliver(incoming(
        node_id{"cli-1", 1}, "rpc", "master", [](auto body) { body.initJob().initStatusRequest(); }, 5));
    auto out = node_->take();
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? wire::job_status{} : wire::read_job_status(out[0].m.body().getJob().getJobStatus());
  }
  // samples_trained in counters.json, as last saved.
  std::uint64_t saved_samples() {
    auto j = nlohmann::json::parse(std::ifstream(dir_ + "/counters.json"), nullptr, false);
    return j.is_object() ? j.value("samples_trained", std::uint64_t{0}) : 0;
  }
  // The metrics events in the job's timeline.
  int metrics_events() {
    int n = 0;
    std::ifstream in(dir_ + "/events.jsonl");
    for (std::string line; std::getline(in, line);) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      n += j.is_object() && j.value("kind", "") == "metrics";
    }
    return n;
  }
  std::uint64_t epoch_file() {
    std::uint64_t e = 0;
    std::ifstream(dir_ + "/master_epoch") >> e;
    return e;
  }

  caf::actor_system sys_;
  caf::scheduler::test_coordinator& sched_;
  std::string dir_;
  std::optional<fake_node> node_;
  std::shared_ptr<dispenser_log> log_;
  supervision::name_registry names_;
  caf::actor dispenser_, master_;
  const node_id w0{"worker-0", 1}, w1{"worker-1", 1};
};

TEST_F(master_test, admits_a_join_and_publishes_the_new_epoch_to_every_member) {
  join(w0, w0);
  auto first = published();
  ASSERT_EQ(first.count("worker-0"), 1u);
  auto e0 = first["worker-0"].view.epoch();
  ASSERT_NE(first["worker-0"].view.find("worker-0"), nullptr);
  EXPECT_EQ(first["worker-0"].view.find("worker-0")->ring_address, "127.0.0.1:3001");  // for TCP ring links
  EXPECT_EQ(epoch_file(), e0);  // a restarted master continues from here

  join(w1, w1);
  auto second = published();
  ASSERT_EQ(second.size(), 2u);  // both workers learn the new epoch, the master sends itself nothing
  EXPECT_EQ(second["worker-1"].view.epoch(), e0 + 1);
  EXPECT_EQ(second["worker-0"].ring_epoch, e0 + 1);  // the worker ring changed
}

// Joins that are in the master's mailbox together (a join storm) are one broadcast: each member
// gets one view, with all of them, not one view per join.
TEST_F(master_test, joins_queued_together_are_broadcast_once) {
  const node_id w2{"worker-2", 1};
  for (const auto* w : {&w0, &w1, &w2})
    caf::anon_send(master_, incoming(*w, "node", "master", [&](auto body) {
                     auto j = body.initJoin();
                     wire::write_node(j.initNode(), *w);
                     j.setAddress("127.0.0.1:2001");
                     j.setRole("worker");
                     j.setPid(4242);
                   }));
  sched_.run();
  std::map<std::string, int> views;
  for (auto& s : node_->take())
    if (s.m.kind() == schema::Envelope::Body::MEMBERSHIP) {
      ++views[s.node];
      EXPECT_EQ(wire::read_membership(s.m.body().getMembership()).view.members().size(), 4u);
    }
  EXPECT_EQ(views, (std::map<std::string, int>{{"worker-0", 1}, {"worker-1", 1}, {"worker-2", 1}}));
}

// A worker that dies partway through a task: its task goes back keeping the rows its progress said
// the ring applied, once a survivor's report says its replica reached that step (here the next one,
// a tick later; the dispenser's leases stay the dead holder's meanwhile, not reconciled away).
TEST_F(master_test, a_dead_workers_task_keeps_the_rows_a_survivors_replica_holds) {
  node_->spec().job.progress_every = std::chrono::seconds(2);  // a decision deferred 4 s at most
  join(w0, w0);
  join(w1, w1);
  node_->take();
  progress(w1, 64, 1, 30);
  progress(w0, 64, 1, 30, {7, 2, 640, 30});
  progress(w0, 64, 1, 31, {7, 2, 704, 31});
  exited(w0, node_id{"runner", 1});
  EXPECT_TRUE(log_->requeued.empty()) << "decided before the survivor said it reached step 31";
  tick(std::chrono::seconds(3));  // a reconciliation is due: the deferred holder counts as alive
  EXPECT_TRUE(log_->requeued.empty());
  ASSERT_FALSE(log_->reconciled.empty());
  for (const auto& alive : log_->reconciled)
    EXPECT_NE(std::find(alive.begin(), alive.end(), w0.to_string()), alive.end());
  progress(w1, 64, 1, 32);
  tick();
  ASSERT_EQ(log_->requeued, std::vector<std::string>{w0.to_string()});
  EXPECT_EQ(log_->kept[0], (std::vector<std::uint64_t>{7, 2, 704, 31}));
  // Alone, a worker's rows die with it: its task goes back whole, at once.
  progress(w1, 64, 1, 40, {9, 1, 128, 40});
  exited(w1, node_id{"runner", 1});
  ASSERT_EQ(log_->requeued.size(), 2u);
  EXPECT_TRUE(log_->kept[1].empty());
}

TEST_F(master_test, refuses_a_join_sent_on_behalf_of_another_node) {
  join(w1, w0);
  EXPECT_TRUE(node_->take().empty());
  join(w0, w0);
  auto p = published();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p["worker-0"].view.find("worker-1"), nullptr);
}

TEST_F(master_test, the_runners_exit_notice_requeues_the_workers_tasks_and_republishes) {
  join(w0, w0);
  join(w1, w1);
  node_->take();
  exited(w0, node_id{"runner", 1});
  ASSERT_EQ(log_->requeued, std::vector<std::string>{w0.to_string()});
  EXPECT_EQ(node_->forgotten.count(w0.to_string()), 1u);
  auto p = published();
  ASSERT_EQ(p.size(), 1u);  // only the survivor is told
  EXPECT_EQ(p["worker-1"].view.find("worker-0"), nullptr);
  EXPECT_NE(p["worker-1"].reason.find("worker-0"), std::string::npos);

  exited(w0, node_id{"runner", 1});  // a second report of the same death changes nothing
  EXPECT_EQ(log_->requeued.size(), 1u);
  EXPECT_TRUE(published().empty());
}

// A death reaches the members that hold the last view as a delta naming the dead member (not the
// whole view of N members); a member that joined since, or whose last send failed, gets the whole.
TEST_F(master_test, a_death_is_sent_as_a_delta_to_members_holding_the_last_view) {
  const node_id w2{"worker-2", 1};
  join(w0, w0);
  join(w1, w1);
  join(w2, w2);
  published();
  exited(w0, node_id{"runner", 1});
  std::map<std::string, std::size_t> bytes;
  for (auto& s : node_->take()) {
    ASSERT_EQ(s.m.kind(), schema::Envelope::Body::MEMBERSHIP);
    auto d = wire::read_membership(s.m.body().getMembership());
    ASSERT_TRUE(d.delta()) << s.node;
    EXPECT_EQ(d.epoch, d.base_epoch + 1);
    EXPECT_EQ(d.gone, std::vector<node_id>{w0});
    EXPECT_TRUE(d.changed.empty());
    EXPECT_NE(d.reason.find("worker-0"), std::string::npos);
    auto v = node_->held_views[s.node];
    EXPECT_EQ(v.epoch(), d.epoch);
    EXPECT_EQ(v.find("worker-0"), nullptr);
    ASSERT_NE(v.find("worker-2"), nullptr);
    EXPECT_EQ(v.find("worker-2")->ring_address, "127.0.0.1:3001");
  }
  EXPECT_EQ(node_->views_missed, 0u);

  // While sends fail (connections down) nobody is known to hold the view: the whole one next.
  const node_id w3{"worker-3", 1};
  node_->connected = false;
  join(w3, w3);
  node_->connected = true;
  EXPECT_TRUE(node_->take().empty());
  exited(w3, node_id{"runner", 1});
  std::map<std::string, bool> delta;
  for (auto& s : node_->take()) delta[s.node] = wire::read_membership(s.m.body().getMembership()).delta();
  EXPECT_EQ(delta, (std::map<std::string, bool>{{"worker-1", false}, {"worker-2", false}}));
}

// A member that joins again (it missed a view and cannot take a delta) gets the whole view, and
// nobody else gets anything: the view did not change.
TEST_F(master_test, a_member_joining_again_gets_the_whole_view_alone) {
  join(w0, w0);
  join(w1, w1);
  const auto epoch = published()["worker-1"].view.epoch();
  join(w0, w0);
  auto sent = node_->take();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].node, "worker-0");
  auto v = wire::read_membership(sent[0].m.body().getMembership());
  EXPECT_FALSE(v.delta());
  EXPECT_EQ(v.view.epoch(), epoch);
  EXPECT_EQ(v.view.members().size(), 3u);
  exited(w1, node_id{"runner", 1});  // and the next change reaches it as a delta
  auto p = node_->take();
  ASSERT_EQ(p.size(), 1u);
  EXPECT_TRUE(wire::read_membership(p[0].m.body().getMembership()).delta());
  EXPECT_EQ(node_->views_missed, 0u);
}

TEST_F(master_test, a_neighbours_report_counts_only_once_liveness_confirms_it) {
  join(w0, w0);
  join(w1, w1);
  node_->take();
  exited(w0, w1);  // worker-0 still runs as far as liveness knows
  EXPECT_TRUE(log_->requeued.empty());
  EXPECT_TRUE(published().empty());

  node_->gone_nodes.insert(w0.to_string());
  exited(w0, w1);
  EXPECT_EQ(log_->requeued, std::vector<std::string>{w0.to_string()});
  EXPECT_EQ(published().count("worker-1"), 1u);
}

TEST_F(master_test, a_nodes_own_leave_notice_removes_it_and_answers_it_with_the_new_view) {
  join(w0, w0);
  join(w1, w1);
  node_->take();
  exited(w0, w0);  // SIGTERM: it leaves on its own word, no liveness check needed
  EXPECT_EQ(log_->requeued, std::vector<std::string>{w0.to_string()});
  auto p = published();
  ASSERT_EQ(p.count("worker-1"), 1u);
  EXPECT_EQ(p["worker-1"].view.find("worker-0"), nullptr);
  ASSERT_EQ(p.count("worker-0"), 1u);  // the leaver waits for this answer before it exits
  EXPECT_EQ(p["worker-0"].view.find("worker-0"), nullptr);
}

TEST_F(master_test, a_stale_incarnations_exit_does_not_remove_its_successor) {
  join(w0, w0);
  node_->take();
  exited(node_id{"worker-0", 0}, node_id{"runner", 1});
  EXPECT_TRUE(log_->requeued.empty());
  EXPECT_TRUE(published().empty());
}

TEST_F(master_test, status_is_answered_to_the_asker_with_its_correlation_id) {
  join(w0, w0);
  log_->counts.todo = 3;
  log_->counts.done = 1;
  tick();  // the master asks the dispenser for its counts
  node_->take();
  deliver(incoming(
      node_id{"cli-7", 1}, "rpc", "master", [](auto body) { body.initJob().initStatusRequest(); }, 77));
  auto out = node_->take();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].node, "cli-7");
  EXPECT_EQ(out[0].to, "rpc");
  EXPECT_EQ(out[0].m.envelope().getCorrelationId(), 77u);
  auto s = wire::read_job_status(out[0].m.body().getJob().getJobStatus());
  EXPECT_EQ(s.job_id, "job-m");
  EXPECT_EQ(s.workers_alive, 1u);
  EXPECT_EQ(s.tasks.todo, 3u);
  EXPECT_EQ(s.tasks.done, 1u);
  EXPECT_FALSE(s.finished);
}

TEST_F(master_test, holders_that_are_not_members_are_reconciled_after_the_grace_period) {
  join(w0, w0);
  tick(std::chrono::milliseconds(100));
  EXPECT_TRUE(log_->reconciled.empty());  // survivors of a master restart get time to re-join
  tick(std::chrono::seconds(4));
  ASSERT_EQ(log_->reconciled.size(), 1u);
  EXPECT_EQ(log_->reconciled[0], std::vector<std::string>{w0.to_string()});
}

// The start-up race of issue 44: a worker leases its first task before it joins (it warms up on
// it). While it is connected to the master's node it is a live holder, however long its start takes;
// once its connection is gone (it died before it joined) its task goes back.
TEST_F(master_test, a_connected_worker_that_has_not_joined_yet_keeps_its_task) {
  join(w0, w0);
  node_->connected_peers = {w0, w1};  // worker-1 is still warming up: connected, not a member
  tick(std::chrono::seconds(4));
  ASSERT_EQ(log_->reconciled.size(), 1u);
  EXPECT_NE(std::find(log_->reconciled[0].begin(), log_->reconciled[0].end(), w1.to_string()),
            log_->reconciled[0].end());
  node_->connected_peers = {w0};  // its connection closed before it joined
  tick(std::chrono::seconds(3));
  ASSERT_EQ(log_->reconciled.size(), 2u);
  EXPECT_EQ(log_->reconciled[1], std::vector<std::string>{w0.to_string()});
}

// The runner's word that a worker exited before it joined: its leases go back at once.
TEST_F(master_test, the_runners_exit_notice_of_a_worker_that_never_joined_requeues_its_tasks) {
  exited(w1, node_id{"runner", 0});
  EXPECT_EQ(log_->requeued, std::vector<std::string>{w1.to_string()});
}

// The evaluation request of the current tick, after the counts say every task is over.
std::uint64_t evaluate_request(fake_node& node, std::string* to = nullptr) {
  std::uint64_t id = 0;
  for (auto& s : node.take())
    if (s.m.kind() == schema::Envelope::Body::JOB && s.m.body().getJob().isEvaluate()) {
      id = s.m.envelope().getCorrelationId();
      if (to) *to = s.node;
    }
  return id;
}

// Issue 44: a model that fails in evaluation ended in an endless retry. An evaluation that fails is
// asked again up to max_task_failures times, then the job ends failed, naming the model's error.
TEST_F(master_test, an_evaluation_that_keeps_failing_ends_the_job_failed_with_its_error) {
  node_->spec().job.max_task_failures = 3;
  join(w0, w0);
  deliver(incoming(w0, "worker", "master", [](auto body) { body.initJob().initWorkerDone().setSteps(9); }));
  log_->counts.done = 4;
  tick();
  for (int i = 0; i < 3; ++i) {
    tick();
    auto id = evaluate_request(*node_);
    ASSERT_NE(id, 0u) << "evaluation " << i << " was not asked for";
    EXPECT_EQ(status().evaluating, "worker-0");  // the progress line shows it
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/result.json"));
    deliver(incoming(
        w0, "worker", "master",
        [](auto body) { body.initJob().initEvalResult().setError("forward returns logits of dtype Long"); },
        id));
  }
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/result.json"));
  auto j = nlohmann::json::parse(std::ifstream(dir_ + "/result.json"));
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_NE(j["error"].get<std::string>().find("worker-0: forward returns logits of dtype Long"),
            std::string::npos)
      << j.dump();
  bool told = false, ok = true;
  for (auto& s : node_->take())
    if (s.node == "runner" && s.m.body().getJob().isJobFinished()) {
      told = true;
      ok = s.m.body().getJob().getJobFinished().getOk();
    }
  EXPECT_TRUE(told);
  EXPECT_FALSE(ok);
  tick();
  EXPECT_EQ(evaluate_request(*node_), 0u);  // not asked again
}

// Every task quarantined: nothing was trained, so nothing is evaluated; the job ends failed at once
// and the status names the tasks' error meanwhile.
TEST_F(master_test, a_job_whose_every_task_was_quarantined_ends_without_an_evaluation) {
  join(w0, w0);
  log_->counts.failed = 8;
  log_->counts.last_failure = "task 7: forward returns logits of dtype Long";
  tick();
  tick();
  EXPECT_EQ(evaluate_request(*node_), 0u);
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/result.json"));
  auto j = nlohmann::json::parse(std::ifstream(dir_ + "/result.json"));
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["tasks_failed"], 8);
  EXPECT_EQ(status().task_error, "task 7: forward returns logits of dtype Long");
}

// The dispenser gave up on the tasks left (job.max_quarantined_in_a_row): once none is held the job
// ends failed, its result.json naming why; those left stay TODO.
TEST_F(master_test, a_dispenser_that_gave_up_ends_the_job_with_its_reason) {
  join(w0, w0);
  log_->counts.failed = 8;
  log_->counts.todo = 2917;
  log_->counts.doing = 1;
  log_->counts.gave_up = "8 tasks in a row were quarantined; the last, task 9: storage: corrupt record";
  tick();
  tick();
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/result.json")) << "a task is still held";
  log_->counts.doing = 0;
  tick();
  tick();
  EXPECT_EQ(evaluate_request(*node_), 0u);  // nothing was trained
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/result.json"));
  auto j = nlohmann::json::parse(std::ifstream(dir_ + "/result.json"));
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_EQ(j["error"], log_->counts.gave_up);
}

// Issue 44: "loss 0.0000" before the first step. The loss is NaN (shown as "-", JSON null) until a
// progress window with a step has passed; result.json carries the last window's training loss.
TEST_F(master_test, the_loss_is_unknown_until_a_window_with_a_step_passed) {
  join(w0, w0);
  auto before = status();
  EXPECT_FALSE(before.has_loss());
  progress(w0, 64, 0);  // samples, no step yet
  tick(std::chrono::milliseconds(1100));
  EXPECT_FALSE(status().has_loss());
  progress(w0, 64, 2);
  tick(std::chrono::milliseconds(1100));
  auto after = status();
  ASSERT_TRUE(after.has_loss());
  EXPECT_DOUBLE_EQ(after.loss, 0.5);
}

// A model whose buffers are each worker's own (batch norm's statistics: the cnn, a user's module) is
// evaluated by one worker: the one that trained most (it was the first by name, a replacement of 13
// steps under async_ps: 0.858 for 0.93).
TEST_F(master_test, the_worker_that_trained_most_evaluates_a_model_of_its_own_buffers) {
  node_->spec().nn.model.type = "cnn";
  join(w0, w0);
  join(w1, w1);
  progress(w0, 64, 5);
  progress(w1, 6400, 100);
  for (const auto& w : {w0, w1})
    deliver(incoming(w, "worker", "master", [](auto body) { body.initJob().initWorkerDone().setSteps(9); }));
  log_->counts.done = 4;
  tick();
  tick();
  std::string to;
  ASSERT_NE(evaluate_request(*node_, &to), 0u);
  EXPECT_EQ(to, "worker-1");
}

TEST_F(master_test, once_every_task_is_over_a_finished_worker_evaluates_and_the_runner_is_told) {
  const node_id ps0{"ps-0", 1};
  join(w0, w0);
  join(w1, w1);
  join(ps0, ps0, cluster::node_role::ps);
  deliver(incoming(w1, "worker", "master", [](auto body) { body.initJob().initWorkerDone().setSteps(9); }));
  log_->counts.done = 4;
  tick();  // learns the counts
  tick();  // all over: evaluation requested, and the shard's final checkpoint
  std::uint64_t eval_id = 0;
  int final_asks = 0;
  for (auto& s : node_->take()) {
    if (s.m.kind() != schema::Envelope::Body::JOB) continue;
    if (s.m.body().getJob().isEvaluate()) {
      EXPECT_EQ(s.node, "worker-1");  // the one that finished its loop holds the final model
      eval_id = s.m.envelope().getCorrelationId();
    }
    if (s.m.body().getJob().isFinalCheckpoint()) {
      EXPECT_EQ(s.node, "ps-0");
      EXPECT_EQ(s.to, "ps");
      ++final_asks;
    }
  }
  ASSERT_NE(eval_id, 0u);
  EXPECT_EQ(final_asks, 1);

  auto eval = [&](std::uint64_t id) {
    deliver(incoming(
        w1, "worker", "master",
        [](auto body) {
          auto r = body.initJob().initEvalResult();
          r.setRows(10);
          r.setAccuracy(0.75);
        },
        id));
  };
  eval(eval_id + 100);  // an answer to another request is ignored
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/result.json"));
  eval(eval_id);
  // The model's rows are only in the shard's memory until its final checkpoint: no end yet, and a
  // disk fault (or another node's word) does not end it either.
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/result.json"));
  final_checkpoint_reply(ps0, 0, "ps-0: storage: no space left on device", true);
  final_checkpoint_reply(w0, 7);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/result.json"));
  tick(std::chrono::milliseconds(2100));  // asked again 2 s after the ask that failed
  int again = 0;
  for (auto& s : node_->take())
    again += s.m.kind() == schema::Envelope::Body::JOB && s.m.body().getJob().isFinalCheckpoint();
  EXPECT_EQ(again, 1);
  final_checkpoint_reply(ps0, 7);
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/result.json"));
  auto j = nlohmann::json::parse(std::ifstream(dir_ + "/result.json"));
  EXPECT_EQ(j["evaluated_by"], nlohmann::json::array({"worker-1"}));  // a list, however many
  EXPECT_DOUBLE_EQ(j["test_accuracy"].get<double>(), 0.75);
  bool told = false;
  for (auto& s : node_->take())
    if (s.node == "runner" && s.m.body().getJob().isJobFinished())
      told = s.m.body().getJob().getJobFinished().getOk();
  EXPECT_TRUE(told);
}

// The departures in the job's timeline, by kind ("died", "leave", ...), node names in order.
std::map<std::string, std::vector<std::string>> departures(const std::string& dir) {
  std::map<std::string, std::vector<std::string>> out;
  std::ifstream in(dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("node") && j.contains("cause"))
      out[j.value("kind", "")].push_back(j.value("node", ""));
  }
  return out;
}

// Once the job finished the runner stops every node at once and reports no exits: a PS shard whose
// connection closes then left a finished job; before that, the same close is a death.
TEST_F(master_test, a_connection_closed_after_the_job_finished_is_a_leave_not_a_death) {
  const node_id ps0{"ps-0", 1}, ps1{"ps-1", 1};
  node_->spec().ps.shards = 2;
  join(w0, w0);
  join(ps0, ps0, cluster::node_role::ps);
  join(ps1, ps1, cluster::node_role::ps);
  caf::anon_send(master_, peer_down_atom::value, ps0.name, ps0.incarnation,
                 std::string("connection closed by peer"));
  sched_.run();
  tick(std::chrono::seconds(3));  // no cause came in 2 s: the transport's reason, a death
  EXPECT_EQ(departures(dir_)["died"], std::vector<std::string>{ps0.to_string()});

  deliver(incoming(w0, "worker", "master", [](auto body) { body.initJob().initWorkerDone().setSteps(9); }));
  log_->counts.done = 4;
  tick();
  tick();
  std::uint64_t eval_id = 0;
  for (auto& s : node_->take())
    if (s.m.kind() == schema::Envelope::Body::JOB && s.m.body().getJob().isEvaluate())
      eval_id = s.m.envelope().getCorrelationId();
  ASSERT_NE(eval_id, 0u);
  deliver(incoming(
      w0, "worker", "master", [](auto body) { body.initJob().initEvalResult().setRows(10); }, eval_id));
  final_checkpoint_reply(ps1, 3);
  // ps-0 is dead: the end waits for its next incarnation's final checkpoint (it restores its own
  // latest checkpoint and writes what it holds).
  ASSERT_FALSE(std::filesystem::exists(dir_ + "/result.json"));
  const node_id ps0_again{"ps-0", 2};
  join(ps0_again, ps0_again, cluster::node_role::ps);
  tick();
  bool asked = false;
  for (auto& s : node_->take())
    asked = asked || (s.node == "ps-0" && s.m.kind() == schema::Envelope::Body::JOB &&
                      s.m.body().getJob().isFinalCheckpoint());
  EXPECT_TRUE(asked);
  final_checkpoint_reply(ps0_again, 2);
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/result.json"));

  caf::anon_send(master_, peer_down_atom::value, ps1.name, ps1.incarnation,
                 std::string("connection closed by peer"));
  sched_.run();
  tick(std::chrono::seconds(3));
  auto d = departures(dir_);
  EXPECT_EQ(d["died"], std::vector<std::string>{ps0.to_string()});
  EXPECT_EQ(d["leave"], std::vector<std::string>{ps1.to_string()});
}

TEST_F(master_test, samples_per_second_is_the_last_windows_samples_over_its_seconds_on_the_nodes_clock) {
  join(w0, w0);
  progress(w0, 300, 3);
  tick(std::chrono::milliseconds(2000));  // a window of 2 s (from the master's start)
  EXPECT_DOUBLE_EQ(status().samples_per_sec, 150.0);
  progress(w0, 100, 1);
  tick(std::chrono::milliseconds(500));
  EXPECT_DOUBLE_EQ(status().samples_per_sec, 150.0) << "the window is not a second old: the last one holds";
  tick(std::chrono::milliseconds(500));
  EXPECT_DOUBLE_EQ(status().samples_per_sec, 100.0);
  EXPECT_EQ(status().samples_total, 400u);
}

TEST_F(master_test, counters_are_saved_at_most_once_a_second_of_the_nodes_clock) {
  EXPECT_EQ(saved_samples(), 0u);  // the first tick saved the master's start
  join(w0, w0);
  progress(w0, 300, 3);
  tick(std::chrono::milliseconds(100));
  EXPECT_EQ(saved_samples(), 0u) << "saved 100 ms ago";
  tick(std::chrono::milliseconds(899));
  EXPECT_EQ(saved_samples(), 0u) << "999 ms since the last save";
  tick(std::chrono::milliseconds(1));
  EXPECT_EQ(saved_samples(), 300u);
}

TEST_F(master_test, a_metrics_event_is_written_once_a_second_of_the_nodes_clock) {
  EXPECT_EQ(metrics_events(), 1);  // the first tick's
  for (int i = 0; i < 9; ++i) tick(std::chrono::milliseconds(100));
  EXPECT_EQ(metrics_events(), 1) << "900 ms later";
  tick(std::chrono::milliseconds(100));
  EXPECT_EQ(metrics_events(), 2);
}

}  // namespace
}  // namespace troupe::actors
