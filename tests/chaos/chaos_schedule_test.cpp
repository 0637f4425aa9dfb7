// Fault schedules: the text form, schedule files, seeded random schedules, and the report.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chaos_observe.hpp"
#include "troupe/control/chaos.hpp"

namespace troupe::control {
namespace {

TEST(chaos_schedule, parses_each_fault_kind) {
  auto k = parse_fault("2.5 kill worker");
  ASSERT_TRUE(k);
  EXPECT_EQ(k->kind, fault_kind::kill);
  EXPECT_DOUBLE_EQ(k->at_s, 2.5);
  EXPECT_EQ(k->target, "worker");
  auto s = parse_fault("4 stop worker-1 hold=3");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->kind, fault_kind::stop);
  EXPECT_DOUBLE_EQ(s->hold_s, 3.0);
  auto d = parse_fault("3 drop ps-0 p=0.3 hold=2");
  ASSERT_TRUE(d);
  EXPECT_DOUBLE_EQ(d->drop_probability, 0.3);
  auto y = parse_fault("3 delay master us=2000");
  ASSERT_TRUE(y);
  EXPECT_EQ(y->delay_us, 2000u);
  auto p = parse_fault("8 preempt worker-2 hold=4");  // Slurm jobs: a high-priority job takes the host
  ASSERT_TRUE(p);
  EXPECT_EQ(p->kind, fault_kind::preempt);
  EXPECT_DOUBLE_EQ(p->hold_s, 4.0);
}

TEST(chaos_schedule, bad_faults_name_the_problem) {
  for (const char* bad : {"", "x kill worker", "1 explode worker", "1 kill", "1 drop w p=2", "1 kill w hold",
                          "-1 kill worker", "1 stop w speed=3"}) {
    auto f = parse_fault(bad);
    ASSERT_FALSE(f) << bad;
    EXPECT_NE(f.err().to_string().find("fault"), std::string::npos) << f.err().to_string();
  }
}

TEST(chaos_schedule, reads_a_schedule_file) {
  auto path =
      std::filesystem::temp_directory_path() / ("chaos-schedule-" + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << "[chaos]\nfaults = [\"1 kill worker\", \"2 stop ps-0 hold=0.5\"]\n";
  auto s = read_schedule(path.string());
  ASSERT_TRUE(s) << s.err().to_string();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1].kind, fault_kind::stop);
  std::ofstream(path) << "[chaos]\nfaults = [\"1 kill\"]\n";
  EXPECT_FALSE(read_schedule(path.string()));
  std::ofstream(path) << "[chaos]\nfault = []\n";
  EXPECT_FALSE(read_schedule(path.string()));  // unknown key
  std::filesystem::remove(path);
}

TEST(chaos_schedule, random_schedules_repeat_with_the_seed) {
  random_faults r;
  r.seed = 42;
  r.rate = 4;
  r.duration_s = 10;
  r.kinds = {fault_kind::kill, fault_kind::stop};
  auto a = random_schedule(r), b = random_schedule(r);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_GT(a.size(), 15u);
  EXPECT_LT(a.size(), 60u);
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_DOUBLE_EQ(a[i].at_s, b[i].at_s);
    EXPECT_EQ(a[i].target, b[i].target);
    EXPECT_GE(a[i].at_s, r.start_s);
    EXPECT_LT(a[i].at_s, r.duration_s);
  }
  r.seed = 43;
  auto c = random_schedule(r);
  EXPECT_TRUE(c.size() != a.size() || c[0].at_s != a[0].at_s);
}

TEST(chaos_report, json_and_table_show_every_fault) {
  chaos_report rep;
  rep.job_dir = "/tmp/j";
  fault_record f;
  f.spec = *parse_fault("1 kill worker");
  f.node = "worker-1#0";
  f.pid = 123;
  f.detected_s = 0.25;
  rep.faults.push_back(f);
  rep.job_exit_code = 0;
  auto j = nlohmann::json::parse(rep.to_json());
  ASSERT_EQ(j["faults"].size(), 1u);
  EXPECT_DOUBLE_EQ(j["faults"][0]["detected_s"].get<double>(), 0.25);
  EXPECT_TRUE(j["faults"][0]["recovered_s"].is_null());
  EXPECT_NE(rep.summary_table().find("worker-1#0"), std::string::npos);
}

// A kill detected in a job's last moments, whose job ended before any poll saw it finished (the
// runner answers no status while it writes the model): said, not left as never recovered.
TEST(chaos_observe, a_fault_detected_in_a_job_that_ended_says_so) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("troupe-chaos-observe-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto closed = [&](bool ended) {
    std::filesystem::remove(dir / "result.json");
    if (ended)
      std::ofstream(dir / "result.json") << R"({"status":"finished","ok":true})"
                                         << "\n";
    observer obs(dir.string(), troupe::clock::system());
    std::vector<fault_record> recs(1);
    recs[0].spec.kind = fault_kind::kill;
    cluster::node_record n;
    n.id = {"worker-2", 1};
    obs.before_fault(0, recs[0], n);
    recs[0].detected_s = 0.05;
    obs.close(recs);
    return recs[0];
  };
  EXPECT_EQ(closed(true).note, "job finished before recovery was seen");
  EXPECT_EQ(closed(false).note, "") << "a job still running: nothing to say";
  std::ofstream(dir / "result.json") << R"({"ok":true})"
                                     << "\n";  // the master's (no status): not ended
  EXPECT_EQ(job_end_state(dir.string()), "");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::control
