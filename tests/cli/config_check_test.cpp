// `troupe config check` refuses what `troupe run` refuses, with the same key named, and both exit 2
// before any job starts; `troupe chaos` refuses an unknown target before it starts its job.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "run_command.hpp"

namespace {

using troupe::test_util::run_troupe;
using troupe::test_util::temp_path;
using troupe::test_util::write_temp;

const char* ctr_data = "[data]\nsource = 'synthetic-ctr'\nrows = 1000\nfields = 4\nvocab_per_field = 10\n";

struct refused {
  const char* name;
  std::string toml;
  const char* key;  // named in the one error line
};

std::string job_root_line(const std::filesystem::path& root) {
  return "[job]\nroot = '" + root.string() + "'\n";
}

// check and run both exit 2 naming `key`; run makes no job directory.
void expect_refused_by_both(const refused& c, const std::string& set = "") {
  auto root = temp_path(std::string(c.name) + "-jobs");
  auto f = write_temp(std::string(c.name) + ".toml", job_root_line(root) + c.toml);
  auto check = run_troupe("config check " + f + set);
  EXPECT_EQ(check.code, 2) << c.name << ": " << check.out;
  EXPECT_NE(check.out.find(c.key), std::string::npos) << c.name << ": " << check.out;
  auto run = run_troupe("run " + f + set + " --quiet");
  EXPECT_EQ(run.code, 2) << c.name << ": " << run.out;
  EXPECT_NE(run.out.find(c.key), std::string::npos) << c.name << ": " << run.out;
  EXPECT_FALSE(std::filesystem::exists(root)) << c.name << ": a job directory was made";
  std::filesystem::remove(f);
}

TEST(config_check, refuses_what_run_refuses) {
  const refused cases[] = {
      {"deepfm-allreduce", std::string("strategy = 'allreduce'\n[model]\ntype = 'deepfm'\n") + ctr_data,
       "job.strategy"},
      {"min-above-workers", "workers = 2\nmin_workers = 3\n", "job.min_workers"},
      {"listen-port", std::string(ctr_data) + "[transport]\nlisten_port = 5555\n", "transport.listen_port"},
      {"missing-dir", "[data]\nsource = 'fashion-mnist'\ndir = '/nonexistent/fashion'\n", "data.dir"},
      {"dir-as-file", "[data]\nsource = 'criteo'\ntrain = '/tmp'\n", "data.train"},
      {"missing-store", "[data]\nsource = 'store'\ntrain = '/nonexistent/a'\ntest = '/nonexistent/b'\n",
       "data.train"},
  };
  for (const auto& c : cases) expect_refused_by_both(c);
}

TEST(config_check, zero_workers_is_refused_not_rounded_up) {
  expect_refused_by_both({"zero-workers", ctr_data, "job.workers"}, " --set job.workers=0");
}

TEST(config_check, a_directory_is_not_a_job_file) {
  auto dir = temp_path("a-dir");
  std::filesystem::create_directories(dir);
  auto r = run_troupe("config check " + dir.string());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is a directory"), std::string::npos) << r.out;
  std::filesystem::remove(dir);
}

TEST(config_check, a_valid_job_passes_both_checks) {
  auto f = write_temp("ok.toml",
                      std::string("[job]\nstrategy = 'async_ps'\n[model]\ntype = 'deepfm'\n") + ctr_data);
  auto r = run_troupe("config check " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  std::filesystem::remove(f);
}

TEST(chaos_cli, unknown_target_is_exit_2_before_the_job) {
  auto root = temp_path("chaos-jobs");
  auto f = write_temp("chaos.toml", job_root_line(root) + ctr_data);
  auto r = run_troupe("chaos --job " + f + " --fault '1 kill nobody'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown target 'nobody'"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(root));
  auto rnd = run_troupe("chaos --job " + f + " --rate 1 --targets worker,nobody");
  EXPECT_EQ(rnd.code, 2) << rnd.out;
  std::filesystem::remove(f);
}

}  // namespace
