#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "troupe/core/config.hpp"
#include "troupe/core/log.hpp"

namespace troupe {
namespace {

config_doc parse(const std::string& text) {
  auto d = config_doc::from_string(text, "job.toml");
  EXPECT_TRUE(d) << d.err().to_string();
  return *d;
}

TEST(config, reads_typed_values_and_defaults) {
  auto doc = parse("[job]\nworkers = 4\nlr = 0.5\nname = 'x'\nshuffle = true\nids = [1, 2]\n");
  config_reader r(doc);
  auto job = r.section("job");
  EXPECT_EQ(job.get_int("workers", 1, 1, 64), 4);
  EXPECT_DOUBLE_EQ(job.get_double("lr", 0.1), 0.5);
  EXPECT_EQ(job.get_string("name", "d"), "x");
  EXPECT_TRUE(job.get_bool("shuffle", false));
  EXPECT_EQ(job.get_ints("ids", {}), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(job.get_int("absent", 7), 7);
  EXPECT_TRUE(r.finish());
}

TEST(config, wrong_type_names_file_line_and_key) {
  auto doc = parse("[job]\n\nworkers = 'four'\n");
  config_reader r(doc);
  (void)r.section("job").get_int("workers", 1);
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.err() == core_errc::wrong_type);
  EXPECT_EQ(res.err().context(), "job.toml:3: key 'job.workers': expected an integer, got a string");
}

TEST(config, out_of_range_names_key_and_bounds) {
  auto doc = parse("[job]\nworkers = 0\n");
  config_reader r(doc);
  (void)r.section("job").get_int("workers", 1, 1, 64);
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.err() == core_errc::out_of_range);
  EXPECT_NE(res.err().context().find("key 'job.workers': 0 is outside [1, 64]"), std::string::npos);
}

TEST(config, missing_required_key) {
  auto doc = parse("[job]\n");
  config_reader r(doc);
  (void)r.section("job").require_string("model");
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.err() == core_errc::missing_key);
  EXPECT_NE(res.err().context().find("'job.model'"), std::string::npos);
}

TEST(config, unknown_key_is_reported_as_typo) {
  auto doc = parse("[job]\nwrokers = 4\n");
  config_reader r(doc);
  (void)r.section("job").get_int("workers", 1);
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.err() == core_errc::unknown_key);
  EXPECT_NE(res.err().context().find("job.toml:2: key 'job.wrokers'"), std::string::npos);
  EXPECT_NE(res.err().context().find("did you mean 'job.workers'?"), std::string::npos)
      << res.err().context();
  auto far = parse("[job]\nstrategy_name = 'x'\n");  // nothing near: no guess
  config_reader f(far);
  (void)f.section("job").get_int("workers", 1);
  auto none = f.finish();
  ASSERT_FALSE(none);
  EXPECT_EQ(none.err().context().find("did you mean"), std::string::npos) << none.err().context();
  // A key of another section: that section's, when only one has the name.
  auto moved = parse("[job]\nworkers = 2\n[train]\nstrategy = 'allreduce'\n");
  config_reader m(moved);
  (void)m.section("job").get_int("workers", 1);
  (void)m.section("job").get_string("strategy", "async_ps");
  auto other = m.finish();
  ASSERT_FALSE(other);
  EXPECT_NE(other.err().context().find("key 'train.strategy': unknown key"), std::string::npos);
  EXPECT_NE(other.err().context().find("did you mean 'job.strategy'?"), std::string::npos)
      << other.err().context();
  // An enum given another type names its choices.
  auto typed = parse("[train]\nbatch = 64\n");
  config_reader t(typed);
  (void)t.section("train").get_enum("batch", "fixed", {"fixed", "auto", "global"});
  auto wrong = t.finish();
  ASSERT_FALSE(wrong);
  EXPECT_NE(
      wrong.err().context().find("expected one of fixed, auto, global (a quoted string), got an integer"),
      std::string::npos)
      << wrong.err().context();
  config_reader lenient(doc);
  EXPECT_TRUE(lenient.finish(false));
  config_reader ignoring(doc);
  ignoring.ignore("job");
  EXPECT_TRUE(ignoring.finish());
}

// A key read only with another value of a setting (`[data] train` without `source = "store"`) is
// refused naming where it is read, not as a typo.
TEST(config, a_key_read_only_elsewhere_says_where) {
  auto doc = parse("[data]\ntrain = '/stores/train'\n");
  config_reader r(doc);
  auto s = r.section("data");
  (void)s.get_string("source", "fashion-mnist");
  s.read_with("train", "read with source = \"store\"");
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().context().find("key 'data.train': not read here: read with source = \"store\""),
            std::string::npos)
      << res.err().context();
  auto read = parse("[data]\ntrain = '/stores/train'\n");  // read after all: no complaint
  config_reader ok(read);
  (void)ok.section("data").get_string("train", "");
  ok.section("data").read_with("train", "read with source = \"store\"");
  EXPECT_TRUE(ok.finish());
}

TEST(config, enum_lists_allowed_values) {
  auto doc = parse("strategy = 'sideways'\n");
  config_reader r(doc);
  (void)r.root().get_enum("strategy", "async_ps", {"async_ps", "allreduce"});
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().context().find("'sideways' is not one of: async_ps, allreduce"), std::string::npos);
}

TEST(config, first_error_wins) {
  auto doc = parse("a = 'x'\nb = 'y'\n");
  config_reader r(doc);
  (void)r.root().get_int("a", 0);
  (void)r.root().get_int("b", 0);
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().context().find("'a'"), std::string::npos);
}

TEST(config, syntax_error_names_file_and_line) {
  auto d = config_doc::from_string("[job\nworkers = 1\n", "bad.toml");
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.err() == core_errc::parse_error);
  EXPECT_EQ(d.err().context().rfind("bad.toml:1:", 0), 0u) << d.err().context();
}

TEST(config, missing_file) {
  auto d = config_doc::from_file("/nonexistent/job.toml");
  ASSERT_FALSE(d);
  EXPECT_TRUE(d.err() == core_errc::io_error);
  EXPECT_NE(d.err().context().find("/nonexistent/job.toml"), std::string::npos);
}

// A FIFO nobody writes reads as empty (config check of one waited for good); a device that never
// ends is refused past 4 MiB (/dev/zero was read on).
TEST(config, a_fifo_without_a_writer_and_an_endless_device_do_not_hang) {
  const auto fifo =
      std::filesystem::temp_directory_path() / ("troupe-config-fifo-" + std::to_string(::getpid()));
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto d = config_doc::from_file(fifo.string());
  ASSERT_TRUE(d) << d.err().to_string();
  EXPECT_EQ(d->to_toml(), "");
  std::filesystem::remove(fifo);
  auto zero = config_doc::from_file("/dev/zero");
  ASSERT_FALSE(zero);
  EXPECT_NE(zero.err().context().find("/dev/zero: more than 4 MiB: not a config file"), std::string::npos)
      << zero.err().context();
}

// An empty table of a section whose keys are read is that section with every default (`[job]` alone
// was "key 'job': unknown key"); an empty table no key is read under is still unknown.
TEST(config, an_empty_known_section_is_no_unknown_key) {
  auto doc = parse("[job]\n[jbo]\n");
  config_reader r(doc);
  (void)r.section("job").get_int("workers", 1);
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().context().find("key 'jbo': unknown key"), std::string::npos) << res.err().context();
  auto known = parse("[job]\n");
  config_reader k(known);
  (void)k.section("job").get_int("workers", 1);
  EXPECT_TRUE(k.finish());
}

TEST(config, overrides_set_typed_values_and_create_tables) {
  auto doc = parse("[job]\nworkers = 4\n");
  ASSERT_TRUE(doc.apply_override("job.workers=8"));
  ASSERT_TRUE(doc.apply_override("ps.shards=2"));
  ASSERT_TRUE(doc.apply_override("job.name=hello world"));
  config_reader r(doc);
  EXPECT_EQ(r.section("job").get_int("workers", 1), 8);
  EXPECT_EQ(r.section("ps").get_int("shards", 1), 2);
  EXPECT_EQ(r.section("job").get_string("name", ""), "hello world");
  EXPECT_TRUE(r.finish());
}

TEST(config, bad_override_is_an_error) {
  config_doc doc = parse("x = 1\n");
  EXPECT_FALSE(doc.apply_override("novalue"));
  EXPECT_FALSE(doc.apply_override("=3"));
  EXPECT_FALSE(doc.apply_override("a..b=3"));
  auto r = doc.apply_override("x.y=3");
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == core_errc::wrong_type);
  // A line break began TOML of its own, dropped unseen: `x = 5` set, `y = 7` not.
  auto two = doc.apply_override("x=5\ny = 7");
  ASSERT_FALSE(two);
  EXPECT_NE(two.err().context().find("--set 'x=...': a line break in it"), std::string::npos)
      << two.err().context();
}

TEST(config, a_bad_overridden_value_is_the_flags_error_not_the_files) {
  auto doc = parse("[job]\nworkers = 4\n");
  ASSERT_TRUE(doc.apply_override("job.workers=abc"));
  ASSERT_TRUE(doc.apply_override("job.nosuch=1"));
  config_reader r(doc);
  r.section("job").get_int("workers", 1);
  auto e = r.finish();
  ASSERT_FALSE(e);
  EXPECT_EQ(e.err().context(), "--set job.workers=abc: key 'job.workers': expected an integer, got a string");
  auto doc2 = parse("[job]\nworkers = 4\n");
  ASSERT_TRUE(doc2.apply_override("job.nosuch=1", "--nosuch 1"));
  config_reader r2(doc2);
  r2.section("job").get_int("workers", 1);
  auto e2 = r2.finish();
  ASSERT_FALSE(e2);
  EXPECT_NE(e2.err().context().find("--nosuch 1: key 'job.nosuch': unknown key"), std::string::npos)
      << e2.err().context();
  auto big = doc2.apply_override("train.learning_rate=1e999");
  ASSERT_FALSE(big);
  EXPECT_TRUE(big.err() == core_errc::out_of_range);
  EXPECT_TRUE(doc2.apply_override("job.name=2024-01"));  // not a number: a string
}

TEST(config, overrides_do_not_touch_copies) {
  auto doc = parse("x = 1\n");
  config_doc copy = doc;
  ASSERT_TRUE(doc.apply_override("x=2"));
  config_reader r(copy);
  EXPECT_EQ(r.root().get_int("x", 0), 1);
}

TEST(config, round_trips_through_toml_text) {
  auto doc = parse("[job]\nworkers = 4\n[ps]\nshards = 2\n");
  auto again = config_doc::from_string(doc.to_toml(), "copy");
  ASSERT_TRUE(again);
  config_reader r(*again);
  EXPECT_EQ(r.section("ps").get_int("shards", 0), 2);
}

// Doubles are written as the shortest text that reads back as the same value (toml++ wrote
// 9.9999999999999995e-08 for 1e-7); strings, integers and dates are left as they are.
TEST(config, doubles_are_written_shortest_and_read_back_exactly) {
  auto doc = parse(
      "[train]\nlearning_rate = 1e-7\nbeta2 = 0.999\nwhole = 5.0\nthird = 0.3333333333333333\n"
      "name = \"1.10000000000000009 = x\"\nsizes = [0.1, 2.5e10, -3.0]\nn = 12\nwhen = 1979-05-27\n");
  const auto text = doc.to_toml();
  for (const char* want :
       {"learning_rate = 1e-07", "beta2 = 0.999", "whole = 5.0", "third = 0.3333333333333333",
        "1.10000000000000009 = x", "n = 12", "when = 1979-05-27", "2.5e+10"})
    EXPECT_NE(text.find(want), std::string::npos) << want << " in\n" << text;
  EXPECT_EQ(text.find("9999999"), std::string::npos) << text;
  auto again = config_doc::from_string(text, "copy");
  ASSERT_TRUE(again) << again.err().to_string() << "\n" << text;
  config_reader r(*again);
  auto t = r.section("train");
  EXPECT_EQ(t.get_double("learning_rate", 0), 1e-7);
  EXPECT_EQ(t.get_double("third", 0), 0.3333333333333333);
  EXPECT_EQ(t.get_double("whole", 0), 5.0);
}

TEST(config, wrong_table_type) {
  auto doc = parse("job = 3\n");
  config_reader r(doc);
  (void)r.section("job");
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().context().find("expected a table, got an integer"), std::string::npos);
}

// effective(): the document with every key a getter read, the defaults of absent keys included;
// keys nobody read (an ignored section) stay as the file has them.
TEST(config, effective_holds_every_key_read_with_its_value) {
  auto doc = parse("[job]\nworkers = 4\n[other]\nx = 'kept'\n");
  config_reader r(doc);
  auto job = r.section("job");
  EXPECT_EQ(job.get_int("workers", 1), 4);
  EXPECT_EQ(job.get_int("lease_ms", 30000), 30000);
  EXPECT_EQ(job.section("deep").get_string("name", "n"), "n");
  EXPECT_EQ(job.get_doubles("weights", {0.5, 2}), (std::vector<double>{0.5, 2}));
  EXPECT_EQ(job.get_strings("tags", {}), std::vector<std::string>{});
  r.ignore("other");
  ASSERT_TRUE(r.finish());
  const auto text = r.effective().to_toml();
  for (const char* line : {"workers = 4", "lease_ms = 30000", "name = 'n'", "weights = [ 0.5, 2.0 ]",
                           "tags = []", "x = 'kept'", "[job.deep]"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " in:\n" << text;
  EXPECT_FALSE(doc.has("job.lease_ms")) << "the document read is unchanged";
  auto again = parse(text);
  config_reader r2(again);
  EXPECT_EQ(r2.section("job").get_int("lease_ms", 1), 30000);
}

TEST(config, get_doubles_reads_numbers_and_names_a_wrong_one) {
  auto doc = parse("a = [1, 2.5, -3e2]\nb = [1, 'x']\n");
  config_reader r(doc);
  EXPECT_EQ(r.root().get_doubles("a", {}), (std::vector<double>{1, 2.5, -300}));
  EXPECT_EQ(r.root().get_doubles("b", {7}), std::vector<double>{7});
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().context().find("key 'b': expected an array of numbers"), std::string::npos)
      << res.err().context();
}

TEST(log_config, bad_level_names_the_value) {
  auto doc = parse("[log]\nlevel = 'loud'\n");
  config_reader r(doc);
  (void)log_config::read(r.section("log"), {});
  auto res = r.finish();
  ASSERT_FALSE(res);
  EXPECT_NE(res.err().context().find("key 'log.level': 'loud' is not one of"), std::string::npos);
  EXPECT_FALSE(parse_log_level("loud"));
  EXPECT_TRUE(parse_log_level("debug"));
}

TEST(log_config, writes_log_file) {
  auto dir = std::filesystem::temp_directory_path() / ("troupe-log-" + std::to_string(::getpid()));
  log_config c;
  c.file = (dir / "logs" / "node.log").string();
  c.to_stderr = false;
  c.name = "worker-1";
  ASSERT_TRUE(init_logging(c));
  spdlog::info("hello {}", 42);
  spdlog::default_logger()->flush();
  std::ifstream in(c.file);
  std::string line;
  std::getline(in, line);
  EXPECT_NE(line.find("[worker-1] hello 42"), std::string::npos) << line;
  // A file several jobs may share ([log] file): each line names its job too.
  c.file = (dir / "logs" / "shared.log").string();
  c.job = "job-a";
  ASSERT_TRUE(init_logging(c));
  spdlog::info("from a");
  spdlog::default_logger()->flush();
  std::ifstream shared(c.file);
  std::getline(shared, line);
  EXPECT_NE(line.find("[job-a/worker-1] from a"), std::string::npos) << line;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe
