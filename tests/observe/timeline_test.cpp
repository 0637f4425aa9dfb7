// The typed timeline writers (the field names the dashboard and `troupe status` read), the
// process sampler and the per-node stats reporter.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <limits>
#include <thread>

#include "troupe/observe/timeline.hpp"

namespace troupe::observe {
namespace {

namespace fs = std::filesystem;

class timeline_test : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("troupe-timeline-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<job_event> events() {
    auto r = read_events((dir_ / events_file_name).string());
    EXPECT_TRUE(r);
    return r ? r->events : std::vector<job_event>{};
  }
  fs::path dir_;
};

TEST_F(timeline_test, typed_events_carry_the_fields_readers_expect) {
  job_timeline t(dir_.string());
  t.job_start("async_ps", 4, 1, 8, "deepfm");
  t.membership("died", "worker-3#1", 7, "killed by SIGKILL");
  t.node_event("fenced", "worker-2#0", "declared dead by the master");
  t.requeue("worker-3#1", 2, "holder gone");
  t.quarantine(17, "bad record");
  t.checkpoint("ps-0#0", 12, true);
  t.scale(3, 5);
  metrics_sample m;
  m.samples = 1000;
  m.loss = 0.25;
  m.tasks_done = 4;
  t.metrics(m);
  t.node_stats("worker-0#0", 97.5, 1 << 20);
  t.job_end("finished");
  auto ev = events();
  ASSERT_EQ(ev.size(), 10u);
  EXPECT_EQ(ev[0].text("strategy"), "async_ps");
  EXPECT_EQ(ev[0].number("workers"), 4);
  EXPECT_EQ(ev[1].kind, "died");
  EXPECT_EQ(ev[1].text("node"), "worker-3#1");
  EXPECT_EQ(ev[1].number("epoch"), 7);
  EXPECT_EQ(ev[1].text("cause"), "killed by SIGKILL");
  EXPECT_EQ(ev[2].find("epoch"), nullptr);
  EXPECT_EQ(ev[3].number("tasks"), 2);
  EXPECT_EQ(ev[4].number("task"), 17);
  EXPECT_EQ(ev[5].number("version"), 12);
  EXPECT_EQ(ev[6].number("workers"), 3);
  EXPECT_EQ(ev[7].number("samples"), 1000);
  EXPECT_EQ(ev[7].number("loss"), 0.25);
  EXPECT_EQ(ev[7].number("tasks_done"), 4);
  EXPECT_EQ(ev[8].number("cpu_percent"), 97.5);
  EXPECT_EQ(ev[9].text("state"), "finished");
  for (const auto& e : ev) EXPECT_GT(e.t_ms, 0u);
}

TEST_F(timeline_test, a_metrics_event_without_steps_has_no_loss) {
  job_timeline(dir_.string()).metrics({});
  auto ev = events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].find("loss"), nullptr);
}

// JSON has no infinity: an infinite noise scale (|G|^2 at its floor 0) is a field of its own, never
// the 0 (or null) a reader would take for "no noise".
TEST_F(timeline_test, an_infinite_noise_scale_is_written_as_such) {
  job_timeline t(dir_.string());
  metrics_sample m;
  m.goodput = metrics_sample::goodput_sample{std::numeric_limits<double>::infinity(), 64, 100, 1, 5};
  t.metrics(m);
  m.goodput->noise_scale = 300;
  t.metrics(m);
  batch_choice c;
  c.noise_scale = std::numeric_limits<double>::infinity();
  t.batch_chosen(c);
  // No estimate yet (NaN, as the master passes it before the first round): neither key (the first
  // choice of batch = "global" said "noise_scale": 0.0).
  c.noise_scale = std::numeric_limits<double>::quiet_NaN();
  t.batch_chosen(c);
  auto ev = events();
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[3].find("noise_scale"), nullptr);
  EXPECT_EQ(ev[3].find("noise_scale_infinite"), nullptr);
  EXPECT_EQ(ev[0].find("noise_scale"), nullptr);
  ASSERT_NE(ev[0].find("noise_scale_infinite"), nullptr);
  EXPECT_EQ(ev[0].number("batch"), 64);
  EXPECT_EQ(ev[1].number("noise_scale"), 300);
  EXPECT_EQ(ev[1].find("noise_scale_infinite"), nullptr);
  EXPECT_NE(ev[2].find("noise_scale_infinite"), nullptr);
}

// async_ps: the shards' estimate is written, not the ring's fields its job does not have (it wrote
// "goodput": 0.0 and "progress": 0.0, read as a job making no progress).
TEST_F(timeline_test, an_async_ps_jobs_metrics_carry_its_estimate_and_no_ring_fields) {
  job_timeline t(dir_.string());
  metrics_sample m;
  m.goodput = metrics_sample::goodput_sample{500, 64, 0, 1, 0, false};
  t.metrics(m);
  auto ev = events();
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].number("noise_scale"), 500);
  for (const char* ring : {"batch", "goodput", "lr_factor", "progress"})
    EXPECT_EQ(ev[0].find(ring), nullptr) << ring;
}

TEST_F(timeline_test, a_timeline_that_cannot_write_never_fails_its_caller) {
  job_timeline none;
  none.job_end("failed");
  job_timeline missing((dir_ / "no" / "such" / "dir").string());
  missing.job_end("failed");  // logged once, dropped
  missing.open(dir_.string());
  missing.job_end("failed");
  EXPECT_EQ(events().size(), 1u);
}

TEST(process_sampler, samples_this_process) {
  process_sampler s;
  ASSERT_TRUE(s.sample());
  // Burn 100 ms of this process's CPU time (however long that takes on a busy machine).
  volatile double x = 0;
  std::clock_t until = std::clock() + CLOCKS_PER_SEC / 10;
  while (std::clock() < until) x = x + 1;
  auto b = s.sample();
  ASSERT_TRUE(b);
  EXPECT_GT(b->cpu_percent, 0.0);
  EXPECT_GT(b->rss_bytes, 1u << 20);
  EXPECT_FALSE(process_sampler(1 << 30).sample()) << "no such process";
}

TEST_F(timeline_test, every_node_reports_its_cpu_and_memory) {
  {
    node_stats_reporter r(dir_.string(), "worker-0#0",
                          {std::chrono::milliseconds(20), std::chrono::milliseconds(20)});
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (events().size() < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto ev = events();
  ASSERT_GE(ev.size(), 2u);
  EXPECT_EQ(ev[0].kind, "node_stats");
  EXPECT_EQ(ev[0].text("node"), "worker-0#0");
  EXPECT_GT(ev[0].number("rss_bytes"), 0);
}

// A reporter past its settling time writes at its later pace: every gap after it at least `later`
// (a wait is never shorter than asked), so far fewer events than at the first pace throughout.
TEST_F(timeline_test, a_settled_reporter_writes_at_its_later_pace) {
  const report_pace pace{std::chrono::milliseconds(20), std::chrono::milliseconds(400),
                         std::chrono::seconds(0)};
  const report_pace slowing{pace.first, pace.later, std::chrono::seconds(1)};
  EXPECT_EQ(slowing.at(std::chrono::milliseconds(999)), pace.first);
  EXPECT_EQ(slowing.at(std::chrono::seconds(1)), pace.later);
  EXPECT_EQ(metrics_pace.at(std::chrono::minutes(9)), std::chrono::seconds(1));
  EXPECT_EQ(metrics_pace.at(std::chrono::minutes(11)), std::chrono::seconds(5));
  EXPECT_EQ(node_stats_pace.at(std::chrono::minutes(11)), std::chrono::seconds(30));
  const auto start = std::chrono::steady_clock::now();
  std::int64_t ms = 0;
  {
    node_stats_reporter r(dir_.string(), "worker-0#0", pace);  // settled from the start
    const auto deadline = start + std::chrono::seconds(20);
    while (events().size() < 3 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start)
             .count();
  }
  auto ev = events();
  ASSERT_GE(ev.size(), 3u) << "three events in 20 s";
  EXPECT_LE(static_cast<std::int64_t>(ev.size()), ms / 400 + 2) << "at 20 ms it writes one every 20 ms";
  for (std::size_t i = 1; i < ev.size(); ++i) EXPECT_GE(ev[i].t_ms - ev[i - 1].t_ms, 399u) << i;
}

}  // namespace
}  // namespace troupe::observe
