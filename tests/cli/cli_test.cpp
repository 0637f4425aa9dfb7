// Runs the real `troupe` binary and checks usage, exit codes and error lines.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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

// Random chaos's --kinds and --targets name themselves (they quoted a fault the user never wrote:
// "fault '0 bogus host rate=1gbit': unknown fault kind").
TEST(cli, random_chaos_flags_name_themselves) {
  auto f = write_temp("chaos-job.toml", "[job]\nworkers = 1\n");
  auto kinds = run("chaos --job " + f + " --rate 1 --kinds kill,bogus");
  EXPECT_EQ(kinds.code, 2) << kinds.out;
  EXPECT_NE(kinds.out.find("--kinds bogus: unknown fault kind 'bogus'"), std::string::npos) << kinds.out;
  EXPECT_EQ(kinds.out.find("fault '0"), std::string::npos) << kinds.out;
  auto targets = run("chaos --job " + f + " --rate 1 --targets worker,nobody");
  EXPECT_EQ(targets.code, 2) << targets.out;
  EXPECT_NE(targets.out.find("--targets nobody: unknown target 'nobody'"), std::string::npos) << targets.out;
  // A window with no room, or no draw in it: said so (both read "give --fault, --schedule or --rate").
  auto empty = run("chaos --job " + f + " --rate 1 --duration 1");
  EXPECT_EQ(empty.code, 2) << empty.out;
  EXPECT_NE(empty.out.find("--duration 1 s is not after --start 1 s"), std::string::npos) << empty.out;
  auto none = run("chaos --job " + f + " --rate 1 --rate 0.001 --duration 1.5");  // given twice: the last
  EXPECT_EQ(none.code, 2) << none.out;
  EXPECT_NE(none.out.find("--rate 0.001 drew no fault between 1 s and 1.5 s (seed 1)"), std::string::npos)
      << none.out;
  std::filesystem::remove(f);
}

// `chaos --job F --root R` starts the job under R, as `run --root R` would (--root was not passed on:
// the job went to ./jobs, where the report was not looked for).
TEST(cli, chaos_with_a_job_file_starts_it_under_root) {
  const auto root = troupe::test_util::temp_path("chaos-root");
  auto f = write_temp("chaos-root.toml",
                      "[job]\nworkers = 1\n[data]\nsource = 'synthetic-ctr'\nrows = 2000\nfields = 4\n"
                      "vocab_per_field = 10\n");
  auto r = run("chaos --job " + f + " --root " + root.string() +
               " --job-id rooted --fault '0.2 kill worker' --settle 5 2>&1");
  EXPECT_TRUE(std::filesystem::exists(root / "rooted" / "result.json")) << r.out;
  EXPECT_FALSE(std::filesystem::exists("jobs/rooted")) << r.out;
  std::filesystem::remove_all("jobs/rooted");
  std::filesystem::remove_all(root);
  std::filesystem::remove(f);
}

// A job file that pins [cluster] metrics_port on a port something listens on (another job's master):
// refused before the job starts (the job ran without /metrics, its nodes.json naming the other's).
TEST(cli, a_pinned_metrics_port_in_use_is_refused_before_the_job_starts) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof a;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  const auto port = std::to_string(ntohs(a.sin_port));
  const auto root = std::filesystem::temp_directory_path() / ("cli-metrics-" + std::to_string(::getpid()));
  auto f = write_temp("metrics-port.toml", "[job]\nworkers = 1\nroot = \"" + root.string() +
                                               "\"\n[cluster]\nmetrics_port = " + port + "\n");
  auto r = run("run " + f + " --quiet");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("[cluster] metrics_port = " + port + ": 127.0.0.1:" + port + " is not free"),
            std::string::npos)
      << r.out;
  EXPECT_FALSE(std::filesystem::exists(root)) << "refused before any job directory";
  ::close(fd);
  std::filesystem::remove(f);
  std::filesystem::remove_all(root);
}

TEST(cli, typo_key_is_reported) {
  auto f = write_temp("typo.toml", "[log]\nlevle = 'info'\n");
  auto r = run("config check " + f);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("unknown key"), std::string::npos) << r.out;
  std::filesystem::remove(f);
}

// A [data] of the user's stores without `source = "store"` names the source it needs; it said only
// "key 'data.test': unknown key".
TEST(cli, a_data_key_of_another_source_names_that_source) {
  auto f = write_temp("stores.toml", "[data]\ntrain = '/stores/train'\ntest = '/stores/test'\n");
  auto r = run("config check " + f);
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("key 'data.t"), std::string::npos) << r.out;
  EXPECT_NE(
      r.out.find("read with source = \"store\" or \"criteo\", and this job's source is \"fashion-mnist\" "
                 "(the default)"),
      std::string::npos)
      << r.out;
  std::filesystem::remove(f);
}

TEST(cli, good_config_and_override) {
  auto f = write_temp("good.toml", "[log]\nlevel = 'info'\n");
  auto r = run("config check " + f + " --set log.level=debug --print");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("level = 'debug'"), std::string::npos) << r.out;
  auto bad = run("config check " + f + " --set log.level=3");
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(
      bad.out.find("expected one of trace, debug, info, warn, error, critical, off (a quoted string), got an "
                   "integer"),
      std::string::npos)
      << bad.out;
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

// A value given empty and a count given negative are refused naming the flag, before anything runs:
// `export JOB --out ""` wrote over the job's own model, and -1 was read as 2^64 - 1.
TEST(cli, bad_usage_empty_values_and_negative_counts_name_the_flag) {
  const auto job = troupe::test_util::temp_path("empty-out-job");
  std::filesystem::create_directories(job);
  std::ofstream(job / "job.toml") << "[job]\n";
  const std::pair<std::string, const char*> cases[] = {
      {"export " + job.string() + " --out ''", "--out: empty value (give one, or leave the flag out)"},
      {"predict '' --data x.csv --out y.csv", "empty value"},
      {"run --set '' " + job.string() + "/job.toml", "--set: empty value"},
      {"data inspect /tmp --records -1", "--records: '-1': expected a number from 0 up"},
      {"data import csv x.csv --out y --label z --seed -1", "--seed: '-1': expected a number from 0 up"},
      // A column list naming no column between its commas (rows of no feature were imported).
      {"data import csv x.csv --out y --label z --dense 'a,,b'", "--dense 'a,,b': an empty column name"},
      // A --root that is not there, named as `troupe jobs` names it (it read "no servers under it").
      {"serve status --root /nonexistent-troupe-root", "--root /nonexistent-troupe-root: no such directory"},
  };
  for (const auto& [args, words] : cases) {
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(words), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(job / "model")) << "nothing written";
  std::filesystem::remove_all(job);
}

// A typo gets the nearest subcommand or flag in its one error line (exit 2).
TEST(cli, typos_get_the_nearest_subcommand_or_flag) {
  const std::pair<const char*, const char*> cases[] = {
      {"statsu", "did you mean 'status'?"},
      {"data inpsect /tmp", "did you mean 'inspect'?"},
      {"run --wokers 3 /nonexistent.toml", "did you mean '--workers'?"},
      {"status --job-dri x", "did you mean '--job-dir'?) (run 'troupe status --help' for usage)"},
      // The help of where the wrong word stands (it pointed at 'troupe jobs --help').
      {"exprot jobs", "did you mean 'export'?) (run 'troupe --help' for usage)"},
      {"data inpsect jobs", "(run 'troupe data --help' for usage)"},
  };
  for (const auto& [args, hint] : cases) {
    auto r = run(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
    EXPECT_NE(r.out.find(hint), std::string::npos) << args << ": " << r.out;
    EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << args << ": " << r.out;
  }
  auto far = run("frobnicate");  // nothing near: the choices (CLI11 said "A subcommand is required")
  EXPECT_EQ(far.code, 2) << far.out;
  EXPECT_EQ(far.out.find("did you mean"), std::string::npos) << far.out;
  EXPECT_NE(far.out.find("unknown subcommand 'frobnicate' (one of: "), std::string::npos) << far.out;
  EXPECT_NE(far.out.find("status"), std::string::npos) << far.out;
  auto data = run("data zzzz");
  EXPECT_EQ(data.code, 2) << data.out;
  EXPECT_NE(data.out.find("unknown subcommand 'zzzz' (one of: "), std::string::npos) << data.out;
  EXPECT_NE(data.out.find("import"), std::string::npos) << data.out;
}

// README's exit codes: bad usage is 2, also for a job id that is malformed, taken or reserved, and
// a --job-dir that is not a job's.
TEST(cli, bad_job_ids_and_job_dirs_are_usage_errors) {
  auto root = troupe::test_util::temp_path("ids-jobs");
  auto f = write_temp("ids.toml", "[job]\nroot = '" + root.string() +
                                      "'\nstrategy = 'async_ps'\n[model]\ntype = 'deepfm'\n[data]\nsource = "
                                      "'synthetic-ctr'\nrows = 1000\nfields = 4\nvocab_per_field = 10\n");
  for (const char* id : {"'../x'", "'a b'", "datasets"}) {
    auto r = run("run " + f + " --quiet --job-id " + id);
    EXPECT_EQ(r.code, 2) << id << ": " << r.out;
    EXPECT_NE(r.out.find("job id"), std::string::npos) << id << ": " << r.out;
  }
  EXPECT_FALSE(std::filesystem::exists(root / "datasets" / "job.toml")) << "a job in the dataset cache";
  // A job.name that cannot begin a job id: config check says so, run refuses it naming the key.
  auto noted = run("config check " + f + " --set 'job.name=../../esc'");
  EXPECT_EQ(noted.code, 0) << noted.out;
  EXPECT_NE(noted.out.find("note: job.name '../../esc': the job's default id starts with it"),
            std::string::npos)
      << noted.out;
  auto named = run("run " + f + " --quiet --set 'job.name=a b'");
  EXPECT_EQ(named.code, 2) << named.out;
  EXPECT_NE(named.out.find("job.name 'a b': the job's default id starts with it"), std::string::npos)
      << named.out;
  // --root puts the job under another root (as predict and status take it), here refused by name.
  auto other = run("run " + f + " --quiet --root " + (root / "other").string() + " --job-id datasets");
  EXPECT_EQ(other.code, 2) << other.out;
  EXPECT_NE(other.out.find((root / "other").string()), std::string::npos) << other.out;
  for (const char* id : {"datasets-1000", "serve", "serve-1000"}) {
    auto reserved = run("run " + f + " --quiet --root " + (root / "other").string() + " --job-id " + id);
    EXPECT_EQ(reserved.code, 2) << id << ": " << reserved.out;
    EXPECT_NE(reserved.out.find(std::string("job id '") + id + "': reserved"), std::string::npos)
        << reserved.out;
  }
  auto resumed = run("run --resume " + root.string() + " --root /x");
  EXPECT_EQ(resumed.code, 2) << resumed.out;
  std::filesystem::create_directories(root / "taken");
  std::ofstream(root / "taken" / "job.toml") << "[job]\n";
  auto taken = run("run " + f + " --quiet --job-id taken");
  EXPECT_EQ(taken.code, 2) << taken.out;
  EXPECT_NE(taken.out.find("already exists"), std::string::npos) << taken.out;
  for (const char* cmd : {"status", "stop", "scale --workers 1"}) {
    auto r = run(std::string(cmd) + " --job-dir /nonexistent/job");
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("--job-dir /nonexistent/job: no such job directory"), std::string::npos)
        << cmd << ": " << r.out;
    EXPECT_EQ(r.out.find("missing file"), std::string::npos) << "the error category's words: " << r.out;
  }
  auto gone = run("run --resume " + (root / "taken").string() + " --quiet");  // no logs/: not a job's
  EXPECT_EQ(gone.code, 2) << gone.out;
  EXPECT_NE(gone.out.find("--resume " + (root / "taken" / "logs").string() + ": missing directory"),
            std::string::npos)
      << gone.out;
  EXPECT_EQ(gone.out.find("missing file"), std::string::npos) << gone.out;
  auto plain = run("status --job-dir " + root.string());  // a directory, not a job's
  EXPECT_EQ(plain.code, 2) << plain.out;
  EXPECT_NE(plain.out.find("job.toml: missing (not a job directory?)"), std::string::npos) << plain.out;
  std::filesystem::remove_all(root);
  std::filesystem::remove(f);
}

TEST(cli, missing_file_exits_2) {
  auto r = run("config check /nonexistent/job.toml");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("/nonexistent/job.toml"), std::string::npos) << r.out;
}

// A mistyped root is no empty dataset cache: `troupe data cache` listed "0 entries" and exited 0.
TEST(cli, a_dataset_cache_that_is_not_there_is_named) {
  for (const char* cmd : {"data cache --root /nonexistent/jobs", "data cache prune --root /nonexistent/jobs",
                          "data cache --cache /nonexistent/cache"}) {
    auto r = run(cmd);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("no dataset cache at /nonexistent/"), std::string::npos) << cmd << ": " << r.out;
  }
}

// Another user's entries in a cache are listed as theirs, never opened (their last use read as 1970:
// "20787.9 d ago") and never pruned (prune said nothing of them); --root and --cache are one or the
// other; a missing cache says why it looked where it did.
TEST(cli, another_users_cache_entries_are_listed_as_theirs_and_left_alone) {
  const auto root =
      std::filesystem::temp_directory_path() / ("troupe-cli-cache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(root);
  // Entries a job made: a dataset key's name, holding the preparation lock (no pin, no data yet).
  const auto theirs_entry = root / "cache" / "criteo-00000000000000ab";
  const auto empty = root / "cache" / "synthetic-0123456789abcdef";  // this user's, never used
  for (const auto& e : {theirs_entry, empty}) {
    std::filesystem::create_directories(e);
    std::ofstream(e / "lock") << "";
  }
  std::filesystem::create_directories(root / "cache" / "abc");  // another user's directory, no entry
  ASSERT_EQ(::chown((root / "cache" / "abc").c_str(), 65534, 65534), 0);
  ASSERT_EQ(::chown(theirs_entry.c_str(), 65534, 65534), 0);
  std::filesystem::create_directories(root / "cache" / "thesis");  // the user's own files
  std::ofstream(root / "cache" / "thesis" / "chapter1.txt") << "precious";
  auto listed = run("data cache --cache " + (root / "cache").string());
  EXPECT_EQ(listed.code, 0) << listed.out;
  EXPECT_NE(
      listed.out.find("criteo-00000000000000ab not this user's (another user's (uid 65534)): not opened"),
      std::string::npos)
      << listed.out;
  EXPECT_NE(
      listed.out.find("thesis             no dataset cache entry (no job made it): not opened, never pruned"),
      std::string::npos)
      << listed.out;
  EXPECT_NE(listed.out.find(": 2 entries"), std::string::npos) << listed.out;
  EXPECT_EQ(listed.out.find(" d ago"), std::string::npos) << listed.out;
  EXPECT_NE(listed.out.find("last used never"), std::string::npos) << "an entry never used: " << listed.out;
  // --older-than as `jobs prune` reads it (7d, 12h), a bare number days as before; an entry used
  // never is older than any age.
  for (const char* age : {"12h", "7", "1w"}) {
    auto aged = run("data cache prune --dry-run --older-than " + std::string(age) + " --cache " +
                    (root / "cache").string());
    EXPECT_EQ(aged.code, 0) << age << ": " << aged.out;
    EXPECT_NE(aged.out.find("would remove synthetic-0123456789abcdef"), std::string::npos)
        << age << ": " << aged.out;
  }
  auto soon = run("data cache prune --older-than soon --cache " + (root / "cache").string());
  EXPECT_EQ(soon.code, 2) << soon.out;
  EXPECT_NE(soon.out.find("--older-than soon: not an age"), std::string::npos) << soon.out;
  auto pruned = run("data cache prune --cache " + (root / "cache").string());
  EXPECT_EQ(pruned.code, 0) << pruned.out;
  EXPECT_NE(pruned.out.find("skipped criteo-00000000000000ab"), std::string::npos) << pruned.out;
  EXPECT_NE(pruned.out.find("skipped thesis"), std::string::npos) << pruned.out;
  EXPECT_TRUE(std::filesystem::exists(theirs_entry));
  EXPECT_TRUE(std::filesystem::exists(root / "cache" / "abc"));
  EXPECT_TRUE(std::filesystem::exists(root / "cache" / "thesis" / "chapter1.txt"));
  EXPECT_FALSE(std::filesystem::exists(empty));
  auto both = run("data cache --root " + root.string() + " --cache " + (root / "cache").string());
  EXPECT_EQ(both.code, 2) << both.out;
  EXPECT_NE(both.out.find("--root excludes --cache"), std::string::npos) << both.out;
  std::filesystem::create_directories(root / "jobs" / "datasets");
  ASSERT_EQ(::chown((root / "jobs" / "datasets").c_str(), 65534, 65534), 0);
  auto theirs = run("data cache --root " + (root / "jobs").string());
  EXPECT_EQ(theirs.code, 2) << theirs.out;
  EXPECT_NE(theirs.out.find("/jobs/datasets is another user's, so this user's cache is " +
                            (root / "jobs").string() + "/datasets-" + std::to_string(::geteuid())),
            std::string::npos)
      << theirs.out;
  // A job on a built-in dataset with another user's cache: refused by config check and before the
  // job starts (it was "ok", then the job failed at its start, leaving a failed job directory).
  auto job =
      write_temp("theirs-cache.toml", "[job]\nworkers = 1\nroot = \"" + (root / "jobs").string() + "\"\n");
  for (const std::string cmd : {"config check ", "run --quiet "}) {
    auto r = run(cmd + job + " --set job.dataset_cache=" + (root / "cache").string() + "/abc");
    EXPECT_EQ(r.code, 2) << cmd << r.out;
    EXPECT_NE(
        r.out.find("job.dataset_cache " + (root / "cache").string() + "/abc: another user's (uid 65534)"),
        std::string::npos)
        << cmd << r.out;
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(root / "jobs"), {}), 1)
      << "only datasets/: no job";
  std::filesystem::remove_all(root);
  std::filesystem::remove(job);
}

}  // namespace

namespace {

// `troupe jobs`: every job under the root, newest first, with the dashboard's reading of each (a
// finished job with its result's tasks, one whose runner died "dead" with what to do); a --root
// that is no directory is a usage error naming the flag.
TEST(cli, jobs_lists_every_job_under_the_root) {
  const auto root = troupe::test_util::temp_path("jobs-root");
  std::filesystem::remove_all(root);
  const long long now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  auto job = [&](const std::string& id, long long t0, bool ended) {
    std::filesystem::create_directories(root / id);
    std::ofstream(root / id / "job.toml") << "[job]\n";
    std::ofstream ev(root / id / "events.jsonl");
    ev << R"({"kind":"job_start","strategy":"allreduce","t_ms":)" << t0 << R"(,"workers":2})"
       << "\n";
    if (ended) {
      ev << R"({"kind":"job_end","state":"finished","t_ms":)" << t0 + 65'000 << "}\n";
      std::ofstream(root / id / "result.json")
          << R"({"ok":true,"status":"finished","reason":"every task done","tasks_done":12,"tasks_failed":0})";
    }
  };
  job("older-finished", now - 3'600'000, true);
  job("newer-dead", now - 600'000, false);
  auto r = run("jobs --root " + root.string());
  ASSERT_EQ(r.code, 0) << r.out;
  const auto finished = r.out.find("older-finished");
  const auto dead = r.out.find("newer-dead");
  ASSERT_NE(finished, std::string::npos) << r.out;
  ASSERT_NE(dead, std::string::npos) << r.out;
  EXPECT_LT(dead, finished) << "newest first: " << r.out;
  const auto finished_line = r.out.substr(finished, r.out.find('\n', finished) - finished);
  EXPECT_NE(finished_line.find("finished"), std::string::npos) << finished_line;
  EXPECT_NE(finished_line.find("12/12"), std::string::npos) << finished_line;
  EXPECT_NE(finished_line.find("0:01:05"), std::string::npos) << finished_line;
  const auto dead_line = r.out.substr(dead, r.out.find('\n', dead) - dead);
  EXPECT_NE(dead_line.find("dead"), std::string::npos) << dead_line;
  auto j = run("jobs --json --root " + root.string() + " 2>/dev/null");
  ASSERT_EQ(j.code, 0) << j.out;
  EXPECT_NE(j.out.find(R"("id":"newer-dead")"), std::string::npos) << j.out;
  auto bad = run("jobs --root " + (root / "older-finished" / "job.toml").string());
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("not a directory (the jobs root"), std::string::npos) << bad.out;
  std::filesystem::remove_all(root);
}

}  // namespace

// `jobs prune` sweeps /dev/shm of what killed jobs left and no process holds (their directories
// removed by hand, nothing else would): a job instance's names go whole, and only when every one is
// this user's, unheld and unchanged for 10 minutes; names without an instance are never touched.
TEST(cli, jobs_prune_sweeps_shared_memory_no_process_holds) {
  const auto tag = "/dev/shm/troupe-orphan" + std::to_string(::getpid());
  const auto old = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()) - 3600;
  auto make = [&](const std::string& path, bool aged) {
    std::ofstream(path) << std::string(64, 'x');
    timespec times[2] = {{old, 0}, {old, 0}};
    if (aged) {
      EXPECT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
    }
  };
  const std::string orphan_a = tag + "@aa11-live-worker-0_0", orphan_b = tag + "@aa11-e0-r0";
  const std::string held = tag + "@bb22-live-worker-0_0", held_peer = tag + "@bb22-live-worker-1_0";
  const std::string fresh = tag + "@cc33-live-worker-0_0", no_instance = tag + "-live-worker-0_0";
  const std::string empty_instance = tag + "@-live-worker-0_0", not_hex = tag + "@xyz-live-worker-0_0";
  for (const auto& p : {orphan_a, orphan_b, held, held_peer, no_instance, empty_instance, not_hex})
    make(p, true);
  make(fresh, false);
  const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);  // a live node's beacon
  ASSERT_GE(fd, 0);
  const auto root = troupe::test_util::temp_path("prune-shm-root");
  std::filesystem::create_directories(root);
  auto dry = run("jobs prune --older-than 7d --dry-run --root " + root.string());
  EXPECT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("would remove"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find(tag.substr(16) + "@aa11"), std::string::npos) << dry.out;
  EXPECT_TRUE(std::filesystem::exists(orphan_a));
  auto r = run("jobs prune --older-than 7d --root " + root.string());
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("no process holds: "), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("@bb22"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(orphan_a));
  EXPECT_FALSE(std::filesystem::exists(orphan_b));
  for (const auto& p : {held, held_peer, fresh, no_instance, empty_instance, not_hex}) {
    EXPECT_TRUE(std::filesystem::exists(p)) << p << " was removed";
    std::filesystem::remove(p);
  }
  ::close(fd);
  std::filesystem::remove_all(root);
}

// A run sweeps, as it begins, what jobs killed whole (their runner too) left in /dev/shm, an instance
// of 256 MB or more that no process holds: 11,740 such names (17 GB) filled /dev/shm and the next
// job's workers died of SIGBUS at each relaunch. A small instance is left to `jobs prune`, a held
// one to its job. (A sparse file: its size counted, no memory taken. Unchanged for 5 minutes: past
// the run's 2, short of `jobs prune`'s 10, whose test may run meanwhile.)
TEST(cli, a_run_sweeps_large_shared_memory_of_jobs_killed_whole) {
  struct statvfs shm {};
  ASSERT_EQ(::statvfs("/dev/shm", &shm), 0);
  if (shm.f_bavail * 4 < shm.f_blocks)  // then every run sweeps the small instance too
    GTEST_SKIP() << "/dev/shm is more than 3/4 full: a run sweeps every killed instance then";
  const auto tag = "/dev/shm/troupe-killedrun" + std::to_string(::getpid());
  const auto old = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()) - 300;
  auto make = [&](const std::string& path, off_t size) {
    const int fd = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << path;
    ASSERT_EQ(::ftruncate(fd, size), 0);
    ::close(fd);
    timespec times[2] = {{old, 0}, {old, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  };
  const std::string big = tag + "@dd44-e0-r0-spare-1", big_beacon = tag + "@dd44-live-worker-0_0";
  const std::string small = tag + "@ee55-e0-r0", held = tag + "@ff66-e0-r0";
  make(big, off_t{300} << 20);
  make(big_beacon, 4096);
  make(small, 4096);
  make(held, off_t{300} << 20);
  const int fd = ::open(held.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const auto root = troupe::test_util::temp_path("sweep-root");
  auto f = write_temp("sweep.toml", "[job]\nworkers = 1\nroot = \"" + root.string() +
                                        "\"\n[data]\nsource = 'synthetic-ctr'\nrows = 1000\nfields = 4\n"
                                        "vocab_per_field = 10\n");
  auto r = run("run " + f + " --quiet --job-id swept");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(std::filesystem::exists(big));
  EXPECT_FALSE(std::filesystem::exists(big_beacon)) << "an instance goes whole";
  EXPECT_TRUE(std::filesystem::exists(small)) << "left to jobs prune";
  EXPECT_TRUE(std::filesystem::exists(held)) << "a process holds it";
  // (Its runner.log names it, unless another test's run swept it first: not looked at.)
  ::close(fd);
  for (const auto& p : {big, big_beacon, small, held}) std::filesystem::remove(p);
  std::filesystem::remove_all(root);
  std::filesystem::remove(f);
}

// `troupe run job.toml | head`: the reader leaves, the job runs on to its end and writes its result
// (SIGPIPE killed the runner at its next line, exit 141, no result.json, the job "dead"). A --set
// before the job file takes one value (it took the file too: "give a job file or --resume").
TEST(cli, a_run_whose_output_reader_left_finishes_its_job) {
  const auto root = troupe::test_util::temp_path("pipe-root");
  auto f = write_temp("pipe.toml", "[job]\nworkers = 1\nroot = \"" + root.string() +
                                       "\"\n[data]\nsource = 'synthetic-ctr'\nrows = 1000\nfields = 4\n"
                                       "vocab_per_field = 10\n");
  auto r = troupe::test_util::run_command(std::string(TROUPE_BIN) + " run --set job.name=piped " + f +
                                          " --job-id piped 2>&1 | head -c 1 >/dev/null");
  std::ifstream in(root / "piped" / "result.json");
  std::string result((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(result.find("\"status\":\"finished\""), std::string::npos) << r.out << "\n" << result;
  std::filesystem::remove_all(root);
  std::filesystem::remove(f);
}

// status, stop and scale without --job-dir look under --root: a root that is not there is named as
// such (it read "no job of yours under it", as if it held other users' jobs); an empty one has none.
TEST(cli, a_missing_root_is_named_not_said_to_hold_no_job_of_yours) {
  const auto root = troupe::test_util::temp_path("missing-root");
  std::filesystem::remove_all(root);
  for (const std::string cmd : {"status", "stop", "scale --workers 2"}) {
    auto r = run(cmd + " --root " + root.string());
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.out;
    EXPECT_NE(r.out.find("--root " + root.string() + ": no such directory (the jobs root"), std::string::npos)
        << cmd << ": " << r.out;
  }
  std::filesystem::create_directories(root);
  auto empty = run("status --root " + root.string());
  EXPECT_EQ(empty.code, 2) << empty.out;
  EXPECT_NE(empty.out.find("no job of yours under " + root.string() + " (give --job-dir)"), std::string::npos)
      << empty.out;
  std::filesystem::remove_all(root);
}

// A server still starting (its first model loading: server.json has the model_path it was given, not
// yet a model object) protects that job from a prune: it was removed under the loading server.
TEST(cli, jobs_prune_keeps_the_job_a_starting_server_loads) {
  const auto root = troupe::test_util::temp_path("prune-starting-root");
  std::filesystem::remove_all(root);
  for (const char* sub : {"logs", "journal", "checkpoints", "model"})
    std::filesystem::create_directories(root / "served" / sub);
  std::ofstream(root / "served" / "job.toml") << "[job]\n";
  const auto result = (root / "served" / "result.json").string();
  std::ofstream(result) << R"({"ok":true,"status":"finished"})";
  const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()) - 10 * 86400L;
  timespec times[2] = {{t, 0}, {t, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, result.c_str(), times, 0), 0);
  std::filesystem::create_directories(root / "serve" / "loading");
  std::ofstream(root / "serve" / "loading" / "server.json")
      << R"({"name": "loading", "state": "starting", "model_path": ")" << (root / "served" / "model").string()
      << R"("})";
  const int lock =
      ::open((root / "serve" / "loading" / "server.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(lock, 0);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);  // as the starting server holds it
  auto kept = run("jobs prune --older-than 7d --root " + root.string());
  EXPECT_EQ(kept.code, 0) << kept.out;
  EXPECT_NE(kept.out.find("kept served: its model is served by 'loading'"), std::string::npos) << kept.out;
  EXPECT_TRUE(std::filesystem::exists(root / "served" / "job.toml"));
  ::close(lock);  // the server ended, or runs on another machine of a shared root (its lock unseen):
  const auto now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  auto remote = [&](std::int64_t updated_ms) {
    std::ofstream(root / "serve" / "loading" / "server.json")
        << R"({"name": "loading", "state": "serving", "kernel": "another-boot", "updated_ms": )" << updated_ms
        << R"(, "model": {"model_path": ")" << (root / "served" / "model").string() << R"("}})";
  };
  remote(now_ms);  // its file rewritten now: it serves
  auto elsewhere = run("jobs prune --older-than 7d --root " + root.string());
  EXPECT_NE(elsewhere.out.find("kept served: its model is served by 'loading'"), std::string::npos)
      << elsewhere.out;
  remote(now_ms - 60'000);  // silent for a minute: gone
  auto gone = run("jobs prune --older-than 7d --root " + root.string());
  EXPECT_EQ(gone.code, 0) << gone.out;
  EXPECT_FALSE(std::filesystem::exists(root / "served")) << gone.out;
  std::filesystem::remove_all(root);
}

// `troupe jobs prune --older-than AGE`: removes the directories of jobs that ended longer ago than
// AGE, and only those: a newer ended job and a dead one (its runner died: --resume continues it) stay;
// --dry-run removes nothing; an age that is none is refused.
TEST(cli, jobs_prune_removes_only_jobs_that_ended_long_enough_ago) {
  const auto root = troupe::test_util::temp_path("prune-root");
  std::filesystem::remove_all(root);
  auto job = [&](const std::string& id, const char* status, int days_ago) {
    for (const char* sub : {"logs", "journal", "checkpoints"})
      std::filesystem::create_directories(root / id / sub);
    std::ofstream(root / id / "job.toml") << "[job]\n";
    std::ofstream(root / id / "logs" / "runner.log") << std::string(4096, 'x');
    if (status == nullptr) return;  // dead: no result.json
    const auto result = (root / id / "result.json").string();
    std::ofstream(result) << R"({"ok":true,"status":")" << status << R"("})";
    const auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now()) - days_ago * 86400L;
    timespec times[2] = {{t, 0}, {t, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, result.c_str(), times, 0), 0);
  };
  job("old-finished", "finished", 10);
  job("old-failed", "failed", 9);
  job("new-finished", "finished", 0);
  job("old-dead", nullptr, 0);
  job(".removing-gone-999999999", "finished", 0);  // set aside by a prune that was killed mid-removal
  auto dry = run("jobs prune --older-than 7d --dry-run --root " + root.string());
  ASSERT_EQ(dry.code, 0) << dry.out;
  EXPECT_NE(dry.out.find("would remove old-finished (finished 10.0 d ago"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("would remove old-failed (failed 9.0 d ago"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("would remove 2 jobs"), std::string::npos) << dry.out;
  EXPECT_NE(dry.out.find("would remove .removing-gone-999999999 (a prune that was killed"), std::string::npos)
      << dry.out;
  EXPECT_TRUE(std::filesystem::exists(root / "old-finished"));
  auto weeks = run("jobs prune --older-than 1.3w --dry-run --root " + root.string());  // 9.1 d
  EXPECT_EQ(weeks.code, 0) << weeks.out;
  EXPECT_NE(weeks.out.find("would remove 1 job "), std::string::npos) << weeks.out;
  EXPECT_NE(weeks.out.find("would remove old-finished"), std::string::npos) << weeks.out;
  auto r = run("jobs prune --older-than 7d --root " + root.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("removed 2 jobs"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("kept 2"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(root / "old-finished"));
  EXPECT_FALSE(std::filesystem::exists(root / "old-failed"));
  EXPECT_TRUE(std::filesystem::exists(root / "new-finished" / "result.json"));
  EXPECT_TRUE(std::filesystem::exists(root / "old-dead" / "job.toml"));
  EXPECT_FALSE(std::filesystem::exists(root / ".removing-gone-999999999"));
  for (const auto& e : std::filesystem::directory_iterator(root))
    EXPECT_NE(e.path().filename().string().front(), '.') << e.path() << ": a set-aside directory was left";
  auto bad = run("jobs prune --older-than soon --root " + root.string());
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--older-than soon: not an age"), std::string::npos) << bad.out;
  // A bare number is refused, not taken as seconds: `--older-than 7` meant as days removed every job
  // that ended more than 7 seconds ago.
  auto bare = run("jobs prune --older-than 7 --root " + root.string());
  EXPECT_EQ(bare.code, 2) << bare.out;
  EXPECT_NE(bare.out.find("--older-than 7: give its unit (7d: 7 days, 7h, 7m, 7s, 7w)"), std::string::npos)
      << bare.out;
  EXPECT_TRUE(std::filesystem::exists(root / "new-finished" / "result.json"));
  std::filesystem::remove_all(root);
}
