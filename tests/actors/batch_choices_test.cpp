// A batch choice in the job's timeline once, with its own batch and ring, across a restarted master
// and a resumed job (docs/goodput.md, "Events"; actors/src/master/batch_choices.hpp): the controller
// reports the choice as made and keeps it in its state, and the master numbers choices as the
// timeline (a real events.jsonl) already holds them.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "master/master_observer.hpp"
#include "troupe/job/job_spec.hpp"
#include "worker/goodput/controller.hpp"

namespace troupe::actors {
namespace {

using goodput::controller;
using goodput::controller_options;

std::string fresh_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("troupe-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::vector<nlohmann::json> events_of(const std::string& dir, const std::string& kind) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/events.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (e.is_object() && e.value("kind", "") == kind) out.push_back(e);
  }
  return out;
}

// A report of choice `seq` made at step `at` for a ring of `made_for` (local batch 98), sent by a
// ring of `now_ring`.
wire::goodput_report report(std::uint32_t seq, double at, std::uint32_t made_for, std::uint32_t now_ring,
                            double measured = 0) {
  wire::goodput_report g;
  g.valid = true;
  g.local_batch = 98;
  g.replicas = now_ring;
  g.batch = 98 * now_ring;
  g.choice = seq;
  g.choice_from = 128;
  g.choice_predicted = 1000 + seq;
  g.choice_before = 900;
  g.choice_measured = measured;
  g.choice_replicas = made_for;
  g.choice_batch = 98 * made_for;
  g.choice_progress = at;
  return g;
}

std::unique_ptr<master_observer> observer(const std::string& dir) {
  static job::job_spec spec;
  spec.cluster.metrics_port = -1;
  return std::make_unique<master_observer>(spec, dir, "job-b", "127.0.0.1:1", troupe::clock::system());
}

// The first run chooses twice, each measured; its runner dies; the job is resumed from a checkpoint
// written between the two choices; a master of the resumed run is restarted.
TEST(BatchChoices, AResumedJobNeitherRepeatsAChoiceNorReusesItsNumber) {
  const auto dir = fresh_dir("batch-choices");
  {
    auto first = observer(dir);
    first->goodput(report(1, 40.5f, 2, 2));
    first->goodput(report(1, 40.5f, 2, 2, 700));
    first->goodput(report(2, 90.25f, 2, 2));
    first->goodput(report(2, 90.25f, 2, 2, 800));
    first->goodput(report(2, 90.25f, 2, 2, 810));  // measured once
  }
  ASSERT_EQ(events_of(dir, "batch").size(), 2u);
  ASSERT_EQ(events_of(dir, "batch_measured").size(), 2u);
  {
    auto resumed = observer(dir);
    // The checkpoint's controller (choice 1, made for 2 replicas) in a lone first ring: not new.
    resumed->goodput(report(1, 40.5f, 2, 1));
    resumed->goodput(report(1, 40.5f, 2, 1, 650));
    EXPECT_EQ(events_of(dir, "batch").size(), 2u) << "the restored choice was written again";
    EXPECT_EQ(events_of(dir, "batch_measured").size(), 2u);
    // Its next choice reuses the controller's number 2, at another step: a new choice, numbered 3.
    resumed->goodput(report(2, 61.75f, 1, 1));
    resumed->goodput(report(2, 61.75f, 1, 2, 500));  // measured after a worker joined
  }
  {
    auto restarted = observer(dir);  // the same run's next master: it was all written
    restarted->goodput(report(2, 61.75f, 1, 2, 520));
    restarted->goodput(report(3, 75.0f, 2, 2));  // the controller's 3: after the timeline's 3
  }
  auto chosen = events_of(dir, "batch");
  ASSERT_EQ(chosen.size(), 4u);
  std::vector<int> numbers;
  for (const auto& e : chosen) numbers.push_back(e.value("choice", 0));
  EXPECT_EQ(numbers, (std::vector<int>{1, 2, 3, 4}));
  // Each as made: choice 3 for a ring of one (batch 98) though it was reported by a ring of two.
  EXPECT_EQ(chosen[2].value("batch", 0), 98);
  EXPECT_EQ(chosen[2].value("replicas", 0), 1);
  EXPECT_DOUBLE_EQ(chosen[2].value("at_progress", 0.0), 61.75);
  EXPECT_EQ(chosen[3].value("batch", 0), 196);
  auto measured = events_of(dir, "batch_measured");
  ASSERT_EQ(measured.size(), 3u);
  EXPECT_EQ(measured[2].value("choice", 0), 3);
  EXPECT_EQ(measured[2].value("batch", 0), 98);
  EXPECT_DOUBLE_EQ(measured[2].value("measured_goodput", 0.0), 500);
  std::filesystem::remove_all(dir);
}

// A timeline written before events carried the step: its choices are known by their numbers.
TEST(BatchChoices, AnOlderTimelinesChoicesAreKnownByNumber) {
  const auto dir = fresh_dir("batch-choices-old");
  std::ofstream(dir + "/events.jsonl")
      << R"({"t_ms":1,"kind":"batch","choice":1,"batch":196,"from":128,"replicas":2})"
      << "\n"
      << R"({"t_ms":2,"kind":"batch_measured","choice":1,"batch":196,"measured_goodput":5})"
      << "\n";
  batch_choices c;
  c.read(dir + "/events.jsonl");
  auto& same = c.place(1, 40);
  EXPECT_TRUE(same.chosen);
  EXPECT_TRUE(same.measured);
  EXPECT_EQ(c.place(2, 50).number, 2u);
  EXPECT_FALSE(c.place(2, 50).chosen);
  batch_choices none;
  none.read(dir + "/no-such-file.jsonl");
  EXPECT_EQ(none.place(1, 3).number, 1u);
  std::filesystem::remove_all(dir);
}

controller_options auto_opts() {
  controller_options o;
  o.rule = goodput::lr_rule::adascale;
  o.auto_batch = true;
  o.base_batch = 128;
  o.batch_size = 32;
  o.limits.max_batch = 16 * 128;
  o.limits.max_atomic = 1024;
  o.warm_rounds = 10;
  o.estimate_every = 1;
  return o;
}

// The controller reports its latest choice as made (the ring it was made for, its batch there, the
// step) and keeps it in its state: a lone replica restored from a 4-replica ring's checkpoint
// reports the same choice, while its batch in force is its own.
TEST(BatchChoices, TheControllerReportsItsChoiceAsMadeAndKeepsIt) {
  std::vector<controller> cs(4, controller(auto_opts()));
  auto compute = [](int b) { return 0.001 + 0.00005 * b; };
  double t = 0;
  for (int step = 0; step < 400 && cs[0].report().choice == 0; ++step) {
    const int b = cs[0].batch().atomic, accum = cs[0].batch().accum;
    const double small = 0.05 + 256.0 / b, big = 0.05 + 256.0 / (4.0 * b * (accum + 1));
    std::vector<float> sum(controller::vote_floats, 0.0f), v(controller::vote_floats);
    for (int r = 0; r < 4; ++r) {
      cs[r].cast(v, r, 4, true, small, compute(b), 0);
      for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
    }
    const double step_s = (accum + 1) * compute(b) + 0.004;
    t += step_s;
    for (int r = 0; r < 4; ++r) {
      cs[r].read(sum, r, 4, 1, big, 1.0, 4.0 * b * (accum + 1), false, t);
      cs[r].step_done(step_s, true);
    }
  }
  const auto made = cs[0].report();
  ASSERT_GE(made.choice, 1u) << "no choice in 400 steps";
  EXPECT_EQ(made.choice_replicas, 4u);
  EXPECT_EQ(made.choice_batch, made.batch);
  EXPECT_GT(made.choice_progress, 0.0);
  EXPECT_LE(made.choice_progress, made.progress);
  std::vector<float> st(controller::sync_floats);
  cs[0].pack(st);
  controller lone(auto_opts());
  lone.unpack(st);
  // Not a fresh ring here: a fresh one would choose again for its own size (tested elsewhere).
  lone.alone(true, std::nullopt, 0, false, 0.001, 1.0, lone.batch().local(), 0, false, t + 0.01);
  const auto later = lone.report();
  EXPECT_EQ(later.choice, made.choice);
  EXPECT_EQ(later.replicas, 1u);
  EXPECT_EQ(later.batch, made.batch / 4) << "the batch in force: the choice's local batch, alone";
  EXPECT_EQ(later.choice_batch, made.choice_batch);
  EXPECT_EQ(later.choice_replicas, 4u);
  EXPECT_EQ(later.choice_progress, made.choice_progress);
  EXPECT_EQ(later.choice_from, made.choice_from);
}

// The master's metrics events: each second for ten minutes, then every 5 s (a long job's timeline
// thins out), and a change of the alive workers written after a second, not at the slow pace.
TEST(MasterObserver, MetricsEventsThinOutOnceTheJobHasRunTenMinutes) {
  const auto dir = fresh_dir("metrics-pace");
  static job::job_spec spec;
  spec.cluster.metrics_port = -1;
  troupe::manual_clock clk;
  master_observer obs(spec, dir, "job-p", "127.0.0.1:1", clk);
  auto view = cluster::membership_view::make({0, 4});
  ASSERT_TRUE(view);
  job_progress progress(clk.now());
  // A relaunched master writes nothing before the dispenser's counts are known (its first event read
  // as every count back to 0).
  obs.set_relaunched(true);
  obs.tick(*view, progress, std::nullopt, {}, obs.metrics_due(*view));
  EXPECT_EQ(events_of(dir, "metrics").size(), 0u);
  const std::optional<wire::task_counts> counts = wire::task_counts{};
  auto ticks = [&](int n) {  // n seconds of the master's 100 ms ticks
    for (int i = 0; i < n * 10; ++i) {
      clk.advance(std::chrono::milliseconds(100));
      obs.tick(*view, progress, counts, {}, obs.metrics_due(*view));
    }
  };
  obs.tick(*view, progress, counts, {}, obs.metrics_due(*view));
  ticks(60);
  EXPECT_EQ(events_of(dir, "metrics").size(), 61u) << "one a second at first";
  ticks(600);
  const auto settled = events_of(dir, "metrics").size();
  ticks(100);
  EXPECT_EQ(events_of(dir, "metrics").size() - settled, 20u) << "one every 5 s after ten minutes";
  cluster::member w;
  w.id.name = "worker-0";
  w.role = cluster::node_role::worker;
  w.state = cluster::member_state::alive;
  w.address = "127.0.0.1:7001";
  ASSERT_TRUE(view->join(w));
  const auto before = events_of(dir, "metrics").size();
  ticks(2);
  auto after = events_of(dir, "metrics");
  ASSERT_GE(after.size(), before + 1) << "a worker joined: written within a second or two";
  EXPECT_EQ(after[before].value("workers_alive", 0), 1);
  // The job finished: its last figures are written at the next tick, not up to 5 s later.
  ticks(3);
  const auto finished_at = events_of(dir, "metrics").size();
  obs.job_finished();
  clk.advance(std::chrono::milliseconds(100));
  obs.tick(*view, progress, counts, {}, obs.metrics_due(*view));
  EXPECT_EQ(events_of(dir, "metrics").size(), finished_at + 1) << "the finished job's last figures";
  EXPECT_FALSE(obs.metrics_due(*view)) << "once";
}

}  // namespace
}  // namespace troupe::actors
