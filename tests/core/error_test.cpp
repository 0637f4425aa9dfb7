#include <gtest/gtest.h>

#include "troupe/core/error.hpp"

namespace troupe {
namespace {

expected<int> parse_positive(int v) {
  if (v <= 0) return make_unexpected(core_errc::out_of_range, "value " + std::to_string(v));
  return v;
}

TEST(error, renders_category_message_and_context) {
  error e(core_errc::missing_key, "job.toml: key 'job.workers'");
  EXPECT_EQ(e.to_string(), "core: missing key: job.toml: key 'job.workers'");
  EXPECT_TRUE(e == core_errc::missing_key);
  EXPECT_FALSE(e == core_errc::wrong_type);
}

// The CLI's line: a core error's context says the problem in words; the module and code are for
// logs. Another module's error keeps them (its code may be what says what went wrong).
TEST(error, describe_gives_a_core_errors_context_alone) {
  error wrong(core_errc::wrong_type, "a.toml:2: key 'job.workers': expected an integer, got a string");
  EXPECT_EQ(wrong.describe(), "a.toml:2: key 'job.workers': expected an integer, got a string");
  EXPECT_EQ(error(core_errc::io_error, "").describe(), "core: I/O error");
  error other(std::make_error_code(std::errc::connection_refused), "connect 127.0.0.1:1");
  EXPECT_EQ(other.describe(), other.to_string());
  EXPECT_EQ(error().describe(), "no error");
}

namespace {
// A module's category whose code 1 has contexts that say it in words, and code 2 not.
class words_category final : public troupe::error_category {
 public:
  const char* name() const noexcept override { return "words"; }
  std::string message(int c) const override { return c == 1 ? "bad configuration" : "missing file"; }
  bool context_says_it(int c) const noexcept override { return c == 1; }
};
}  // namespace

// A module's code whose contexts are sentences reads as its context alone (the CLI said "nn: bad
// configuration: houses.toml: model 'deepfm': is a binary (CTR) model ..."); its other codes keep
// their words.
TEST(error, describe_gives_the_context_alone_for_the_codes_a_category_says_it_of) {
  static const words_category cat;
  EXPECT_EQ(error(std::error_code(1, cat), "model 'deepfm': is a binary model").describe(),
            "model 'deepfm': is a binary model");
  EXPECT_EQ(error(std::error_code(2, cat), "nodes.json").describe(), "words: missing file: nodes.json");
  EXPECT_EQ(error(std::error_code(1, cat), "").describe(), "words: bad configuration");
}

TEST(error, default_is_no_error) {
  error e;
  EXPECT_FALSE(e);
  EXPECT_EQ(e.to_string(), "no error");
}

TEST(error, wrap_prepends_context) {
  error e(core_errc::io_error, "read failed");
  e.wrap("records.mdb");
  EXPECT_EQ(e.context(), "records.mdb: read failed");
  error bare(core_errc::io_error, "");
  bare.wrap("x");
  EXPECT_EQ(bare.context(), "x");
}

TEST(expected, holds_value_or_error) {
  auto ok = parse_positive(3);
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 3);
  auto bad = parse_positive(-1);
  ASSERT_FALSE(bad);
  EXPECT_TRUE(bad.err() == core_errc::out_of_range);
  EXPECT_EQ(bad.err().context(), "value -1");
  EXPECT_THROW((void)bad.value(), std::logic_error);
}

TEST(expected, void_specialisation) {
  expected<void> ok;
  EXPECT_TRUE(ok);
  expected<void> bad = make_unexpected(core_errc::io_error, "disk");
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.err().to_string(), "core: I/O error: disk");
}

TEST(error, every_core_code_has_a_message) {
  for (int c = 1; c <= 7; ++c) {
    auto msg = std::error_code(c, core_category()).message();
    EXPECT_EQ(msg.find("unknown core error"), std::string::npos) << c;
  }
  EXPECT_NE(std::error_code(99, core_category()).message().find("unknown core error 99"), std::string::npos);
}

}  // namespace
}  // namespace troupe
