// Splitting delimited lines (RFC 4180 quoting) and reading a file line by line, plain or gzipped.
#include "troupe/nn/data/csv_reader.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <fstream>

#include "run_command.hpp"

namespace troupe::nn {
namespace {

using fields = std::vector<std::string>;

fields split_ok(std::string_view line, char delimiter = ',') {
  fields f;
  auto why = split_delimited(line, delimiter, f);
  EXPECT_EQ(why, "") << line;
  return f;
}

std::string split_bad(std::string_view line) {
  fields f;
  return split_delimited(line, ',', f);
}

TEST(CsvReader, SplitsPlainAndQuotedFields) {
  EXPECT_EQ(split_ok("a,b,c"), (fields{"a", "b", "c"}));
  EXPECT_EQ(split_ok("a,,"), (fields{"a", "", ""}));
  EXPECT_EQ(split_ok(""), (fields{""}));
  EXPECT_EQ(split_ok(R"("x,y",2)"), (fields{"x,y", "2"}));
  EXPECT_EQ(split_ok(R"("say ""hi""",,"")"), (fields{R"(say "hi")", "", ""}));
  EXPECT_EQ(split_ok("a\tb c\t\"d\"", '\t'), (fields{"a", "b c", "d"}));
}

TEST(CsvReader, BadQuotingIsNamed) {
  EXPECT_NE(split_bad(R"(a,"open)").find("is not closed"), std::string::npos);
  EXPECT_NE(split_bad(R"(a,b"c)").find("a quote inside an unquoted field at character 4"), std::string::npos);
  EXPECT_NE(split_bad(R"("a"b,c)").find("text after the closing quote"), std::string::npos);
}

std::vector<csv_line> read_all(const std::string& path) {
  auto r = csv_reader::open(path, ',');
  EXPECT_TRUE(r) << r.err().to_string();
  std::vector<csv_line> out;
  csv_line l;
  while (r && r->next(l)) out.push_back(l);
  EXPECT_TRUE(r && r->finish());
  return out;
}

TEST(CsvReader, ReadsLinesWithNumbersSkippingBlankOnes) {
  auto path = test_util::write_temp("r.csv", "\xEF\xBB\xBFx,y\r\n\n1,\"2\"\r\n3,4,5\n");
  auto lines = read_all(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].fields, (fields{"x", "y"})) << "the byte order mark is dropped";
  EXPECT_EQ(lines[1].number, 3u);
  EXPECT_EQ(lines[1].fields, (fields{"1", "2"}));
  EXPECT_EQ(lines[2].number, 4u);
  EXPECT_EQ(lines[2].fields.size(), 3u) << "the width is the importer's business";
}

// A line of spaces and tabs is blank to a person (it read as a row of 1 field); tabs that are the
// delimiter are fields.
TEST(CsvReader, ALineOfSpacesIsBlankUnlessItHoldsTheDelimiter) {
  auto lines = read_all(test_util::write_temp("s.csv", "x,y\n   \n1,2\n \t \r\n"));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].number, 3u);
  auto tsv = csv_reader::open(test_util::write_temp("s.tsv", "x\ty\n\t\n"), '\t');
  ASSERT_TRUE(tsv);
  csv_line l;
  ASSERT_TRUE(tsv->next(l));
  ASSERT_TRUE(tsv->next(l));
  EXPECT_EQ(l.fields, (fields{"", ""}));
}

// A NUL byte is a byte of its line, named (the line reader's C strings cut the line there and joined
// the rest of the file's next line to it), and a header holding carriage returns names CR line endings.
TEST(CsvReader, ANulByteOrCrLineEndingsAreNamedAndNoLinesAreJoined) {
  auto path = test_util::write_temp("nul.csv", std::string("a,b,c\n1,2\0003,4\n5,6,7\n", 20));
  auto lines = read_all(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1].malformed, "a NUL byte at character 4 (is this a text file?)");
  EXPECT_EQ(lines[2].fields, (fields{"5", "6", "7"}));
  EXPECT_EQ(lines[2].number, 3u);
  auto cr = read_all(test_util::write_temp("cr.csv", "x,y\r1,2\r3,4\r"));
  ASSERT_EQ(cr.size(), 1u);
  EXPECT_NE(cr[0].malformed.find("line endings CR alone"), std::string::npos) << cr[0].malformed;
  // Lines longer than the reader's block, and no newline at the end.
  std::string long_cell(200000, 'x');
  auto big = read_all(test_util::write_temp("big.csv", "a,b\n1," + long_cell + "\n2,3"));
  ASSERT_EQ(big.size(), 3u);
  EXPECT_EQ(big[1].fields, (fields{"1", long_cell}));
  EXPECT_EQ(big[2].fields, (fields{"2", "3"}));
}

TEST(CsvReader, ReadsGzipByContent) {
  auto path = test_util::temp_path("z.data").string();  // no .gz: detected by the magic bytes
  gzFile z = gzopen(path.c_str(), "wb");
  ASSERT_NE(z, nullptr);
  gzputs(z, "a,b\n1,2\n");
  gzclose(z);
  auto lines = read_all(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1].fields, (fields{"1", "2"}));
}

TEST(CsvReader, MissingFileIsNamed) {
  auto r = csv_reader::open("/nonexistent/x.csv", ',');
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("/nonexistent/x.csv: cannot open"), std::string::npos);
}

}  // namespace
}  // namespace troupe::nn
