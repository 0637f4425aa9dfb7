// Runs the real `troupe` binary and checks usage, exit codes and error lines.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "run_command.hpp"

namespace {

using troupe::test_util::command_result;

// stdout and stderr together.
command_result run(const std::string& args) {
  return troupe::test_util::run_troupe(args);
}

using troupe::test_util::write_temp;

TEST(cli, help_lists_subcommands) {
  auto r = run("--help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("config"), std::string::npos) << r.out;
}

TEST(cli, subcommand_help) {
  auto r = run("config check --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--set"), std::string::npos) << r.out;
}

TEST(cli, version) {
  auto r = run("--version");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("0."), std::string::npos);
}

TEST(cli, unknown_flag_is_one_line_and_exit_2) {
  auto r = run("--frobnicate");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(r.out.rfind("troupe: error: ", 0), 0u) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
}

TEST(cli, no_subcommand_is_exit_2) {
  auto r = run("");
  EXPECT_EQ(r.code, 2) << r.out;
}

TEST(cli, bad_config_value_names_key_and_exits_2) {
  auto f = write_temp("bad.toml", "[log]\nlevel = 'loud'\n");
  auto r = run("config check " + f);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("key 'log.level'"), std::string::npos) << r.out;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
  std::filesystem::remove(f);
}

TEST(cli, typo_key_is_reported) {
  auto f = write_temp("typo.toml", "[log]\nlevle = 'info'\n");
  auto r = run("config check " + f);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown key"), std::string::npos) << r.out;
  std::filesystem::remove(f);
}

TEST(cli, good_config_and_override) {
  auto f = write_temp("good.toml", "[log]\nlevel = 'info'\n");
  auto r = run("config check " + f + " --set log.level=debug --print");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("level = 'debug'"), std::string::npos) << r.out;
  auto bad = run("config check " + f + " --set log.level=3");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("expected a string, got an integer"), std::string::npos) << bad.out;
  std::filesystem::remove(f);
}

TEST(cli, cluster_section_is_part_of_a_job_file) {
  auto f = write_temp("cluster.toml", "[cluster]\nlauncher = 'local'\ncapacity_cpus = 2.0\n");
  auto r = run("config check " + f);
  EXPECT_EQ(r.code, 0) << r.out;
  auto bad = run("config check " + f + " --set cluster.launcher=kubernetes");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("cluster.launcher"), std::string::npos) << bad.out;
  EXPECT_EQ(std::count(bad.out.begin(), bad.out.end(), '\n'), 1) << bad.out;
  std::filesystem::remove(f);
}

TEST(cli, missing_file_exits_2) {
  auto r = run("config check /nonexistent/job.toml");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/job.toml"), std::string::npos) << r.out;
}

}  // namespace
