// job::row_encoder (troupe/job/row_encoder.hpp): a CSV imported, then every raw line of it encoded
// again from the store's manifest gives the stored record bit for bit; named cells the same; and
// the errors a row to predict can meet.
#include "troupe/job/row_encoder.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run_command.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/nn/data/csv_reader.hpp"

namespace troupe::job {
namespace {

namespace fs = std::filesystem;

class RowEncoder : public ::testing::Test {
 protected:
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  fs::path dir_ = test_util::temp_path("row-encoder");
};

// Rows as users have them: quoted text with the delimiter, spaces, NaN and empty cells, string
// labels, a column to ignore, a constant column, numbers of very different scales.
std::string users_csv(int n) {
  std::ostringstream o;
  o << "id,income,age,species,city,const,ratio\n";
  const char* species[] = {"cat", "dog", "bird"};
  const char* cities[] = {"paris", "\"new york, ny\"", "", "NA"};
  std::uint64_t s = 99;
  for (int i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    o << i << "," << 20000 + static_cast<double>(s >> 40) / 7.0 << ",";
    if (i % 17 == 3)
      o << "NaN";
    else if (i % 23 == 5)
      o << "";
    else
      o << " " << (s >> 58) + 18 << " ";
    o << "," << species[(s >> 20) % 3] << "," << cities[(s >> 30) % 4] << ",7,"
      << static_cast<double>(s >> 33) * 1e-9 << "\n";
  }
  return o.str();
}

bool same_bits(const storage::record& a, const storage::record& b) {
  if (std::bit_cast<std::uint32_t>(a.label) != std::bit_cast<std::uint32_t>(b.label)) return false;
  if (a.dense.size() != b.dense.size() || a.sparse != b.sparse) return false;
  for (std::size_t i = 0; i < a.dense.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a.dense[i]) != std::bit_cast<std::uint32_t>(b.dense[i])) return false;
  return true;
}

std::vector<storage::record> stored(const std::string& dir, storage::manifest* m = nullptr) {
  auto s = storage::record_store::open(dir);
  EXPECT_TRUE(s) << s.err().to_string();
  std::vector<storage::record> out;
  if (!s) return out;
  if (m) *m = s->info();
  EXPECT_TRUE(s->read_batch(0, s->count(), out));
  return out;
}

const char* missing_policy_name(missing_policy p) {
  return p == missing_policy::mean ? "mean" : "zero";
}

// Every data line of `file`, as the import saw them.
std::vector<std::string> raw_lines(const std::string& file) {
  std::ifstream in(file);
  std::vector<std::string> out;
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// A missing value filled with 0 or with the training rows' mean (the manifest's fill values).
TEST_F(RowEncoder, ReencodingEveryRawLineGivesTheStoredRecordsBitForBit) {
  std::ofstream(path("u.csv")) << users_csv(600);
  for (auto missing : {missing_policy::zero, missing_policy::mean}) {
    SCOPED_TRACE(missing_policy_name(missing));
    csv_import_options o;
    o.file = path("u.csv");
    o.out = path(std::string("store-") + missing_policy_name(missing));
    o.label = "species";
    o.dense = std::vector<std::string>{"income", "age", "const", "ratio"};
    o.sparse = {"city"};
    o.missing = missing;
    o.standardize = std::vector<std::string>{};
    o.test_fraction = 0.3;
    o.buckets_per_field = 64;
    auto r = import_csv(o);
    ASSERT_TRUE(r) << r.err().to_string();
    ASSERT_EQ(r->class_names, (std::vector<std::string>{"bird", "cat", "dog"}));
    ASSERT_GT(r->filled_missing, 0u);
    storage::manifest m;
    auto train = stored(r->train_dir, &m), test = stored(r->test_dir);
    auto enc = row_encoder::from_manifest(m, r->train_dir);
    ASSERT_TRUE(enc) << enc.err().to_string();
    std::size_t i = 0, j = 0, line_no = 1;
    for (const auto& line : raw_lines(o.file)) {
      ++line_no;
      storage::record rec;
      auto e = enc->encode_line(line, rec, "u.csv:" + std::to_string(line_no));
      ASSERT_TRUE(e) << e.err().to_string();
      EXPECT_TRUE(e->labelled);
      for (float v : rec.dense)
        ASSERT_TRUE(std::isfinite(v)) << "line " << line_no << ": a missing value left unfilled";
      if (i < train.size() && same_bits(rec, train[i])) {
        ++i;
      } else {
        ASSERT_LT(j, test.size()) << "line " << line_no << " matches no stored record";
        ASSERT_TRUE(same_bits(rec, test[j])) << "line " << line_no;
        ++j;
      }
    }
    EXPECT_EQ(i, train.size());
    EXPECT_EQ(j, test.size());
  }
}

TEST_F(RowEncoder, NamedCellsAndAnotherHeaderEncodeTheSame) {
  std::ofstream(path("u.csv")) << users_csv(50);
  csv_import_options o;
  o.file = path("u.csv");
  o.out = path("store");
  o.label = "species";
  o.sparse = {"city"};
  o.missing = missing_policy::zero;
  o.standardize = std::vector<std::string>{"income"};
  o.buckets_per_field = 64;
  o.dense = std::vector<std::string>{"income", "age", "ratio"};
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  storage::manifest m;
  auto recs = stored(r->train_dir, &m);
  auto enc = row_encoder::from_manifest(m, "store");
  ASSERT_TRUE(enc);
  auto lines = raw_lines(o.file);
  const std::vector<std::string> header{"id", "income", "age", "species", "city", "const", "ratio"};
  auto predict = row_encoder::create(*m.columns);
  ASSERT_TRUE(predict);
  // Rows to predict: their own column order, no label, no ignored columns.
  ASSERT_TRUE(predict->use_header({"ratio", "city", "age", "income"}));
  for (std::size_t k = 0; k < lines.size(); ++k) {
    std::vector<std::string> fields;
    ASSERT_EQ(nn::split_delimited(lines[k], ',', fields), "");
    std::vector<std::pair<std::string, std::string>> cells;
    for (std::size_t c = 0; c < header.size(); ++c) cells.emplace_back(header[c], fields[c]);
    cells.emplace_back("extra", "ignored");
    storage::record a, b;
    auto e = enc->encode_cells(cells, a);
    ASSERT_TRUE(e) << e.err().to_string();
    EXPECT_TRUE(same_bits(a, recs[k])) << "row " << k;
    std::string reordered = fields[6] + ",\"" + fields[4] + "\"," + fields[2] + "," + fields[1] + "\r\n";
    auto p = predict->encode_line(reordered, b);
    ASSERT_TRUE(p) << p.err().to_string() << ": " << reordered;
    EXPECT_FALSE(p->labelled);
    b.label = a.label;
    EXPECT_TRUE(same_bits(b, a)) << "row " << k;
  }
}

storage::row_format small_format() {
  storage::row_format f;
  f.header = {"y", "a", "b", "c"};
  f.label = "y";
  f.dense = {"a", "b"};
  f.sparse = {"c"};
  f.buckets_per_field = 100;
  f.class_names = {"no", "yes"};
  f.standardize = {{"a", 10, 2}};
  return f;
}

TEST_F(RowEncoder, ErrorsNameTheColumnAndTheProblem) {
  auto enc = row_encoder::create(small_format());
  ASSERT_TRUE(enc) << enc.err().to_string();
  storage::record r;
  auto e = enc->encode_line("yes,12,3,x", r);
  ASSERT_TRUE(e) << e.err().to_string();
  EXPECT_EQ(r.label, 1.f);
  EXPECT_EQ(r.dense, (std::vector<float>{1.f, 3.f}));
  auto err = [&](std::string_view line) {
    auto x = enc->encode_line(line, r, "rows.csv:4");
    return x ? std::string("ok") : x.err().to_string();
  };
  EXPECT_NE(err("yes,abc,3,x").find("rows.csv:4: column 'a' (2): 'abc' is not a number"), std::string::npos);
  EXPECT_NE(err("maybe,1,3,x").find("column 'y' (1): label 'maybe' is not one of the 2 classes (no, yes)"),
            std::string::npos);
  // The model's import rule stands: no --missing flag of predict's or serve's would accept it.
  EXPECT_NE(err("yes,,3,x")
                .find("column 'a' (2): missing value (the model's data was imported with --missing "
                      "error: every value is needed)"),
            std::string::npos)
      << err("yes,,3,x");
  EXPECT_NE(err("yes,1,3").find("rows.csv:4: 3 fields, the header has 4"), std::string::npos);
  EXPECT_NE(err("yes,\"1,3,x").find("rows.csv:4: malformed line"), std::string::npos);
  EXPECT_EQ(err(",1,3,x"), "ok") << "a row to predict needs no label";
  auto cells = enc->encode_cells({{"a", "1"}, {"c", "x"}}, r, "request 3");
  ASSERT_FALSE(cells);
  EXPECT_NE(cells.err().to_string().find("request 3: missing column 'b'"), std::string::npos)
      << cells.err().to_string();
  // A /rows object's cells are named, not placed: no position (it gave the model's, not the client's).
  auto named = enc->encode_cells({{"a", "abc"}, {"b", "3"}, {"c", "x"}}, r, "request 4");
  ASSERT_FALSE(named);
  EXPECT_NE(named.err().to_string().find("request 4: column 'a': 'abc' is not a number"), std::string::npos)
      << named.err().to_string();
  auto header = enc->use_header({"a", "c", "y"});
  ASSERT_FALSE(header);
  EXPECT_NE(header.err().to_string().find("dense column 'b': no such column"), std::string::npos)
      << header.err().to_string();
  // A model imported from a ';' file given a ',' one: the header reads as one column, and says so
  // (the hint knew ';', tab and '|' only: "no such column (the header has: y,a,b,c)").
  auto commas = enc->use_header({"y,a,b,c"});
  ASSERT_FALSE(commas);
  EXPECT_NE(commas.err().to_string().find("is the file separated by ','? (--delimiter ',')"),
            std::string::npos)
      << commas.err().to_string();
  auto f = small_format();
  f.missing = "skip-row";
  auto skip = row_encoder::create(f);
  ASSERT_TRUE(skip);
  auto s = skip->encode_line("yes,NaN,3,x", r);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().to_string().find("column 'a': missing value (the import dropped rows with one"),
            std::string::npos)
      << s.err().to_string();
}

// Labels that are class ids, encoded for a model of 2 classes: an id from 2 up is no class, an error
// naming the line (evaluate scored label 2 as class 2 of a binary model: loss -36.9, accuracy 1.0;
// `data import csv --like` wrote it into a store of 2 classes). Without a count any id is taken.
TEST_F(RowEncoder, ClassIdsPastTheModelsClassesAreRefused) {
  auto f = small_format();
  f.class_names.clear();
  auto enc = row_encoder::create(f, "model.json", 2);
  ASSERT_TRUE(enc) << enc.err().to_string();
  storage::record r;
  ASSERT_TRUE(enc->encode_line("1,12,3,x", r));
  EXPECT_EQ(r.label, 1.f);
  auto two = enc->encode_line("2,12,3,x", r, "rows.csv:7");
  ASSERT_FALSE(two);
  EXPECT_NE(two.err().to_string().find("rows.csv:7: column 'y' (1): label '2' is not a class id of the 2 "
                                       "classes (an integer from 0 to 1)"),
            std::string::npos)
      << two.err().to_string();
  ASSERT_TRUE(enc->use_header({"a", "b", "c", "y"}));  // the bound holds for another header too
  EXPECT_FALSE(enc->encode_line("12,3,x,7", r));
  auto any = row_encoder::create(f);
  ASSERT_TRUE(any);
  ASSERT_TRUE(any->encode_line("7,12,3,x", r));
  EXPECT_EQ(r.label, 7.f);
}

TEST_F(RowEncoder, AFormatThisBuildCannotApplyIsRefused) {
  auto f = small_format();
  f.hash = "md5";
  auto e = row_encoder::create(f, "model.json");
  ASSERT_FALSE(e);
  EXPECT_NE(e.err().to_string().find("model.json: hash 'md5': this build knows troupe-category-v1"),
            std::string::npos);
  f = small_format();
  f.standardize = {{"c", 0, 1}};
  EXPECT_FALSE(row_encoder::create(f)) << "c is sparse";
  f = small_format();
  f.missing = "guess";
  EXPECT_FALSE(row_encoder::create(f));
  storage::manifest plain;
  plain.source = "fashion-mnist:train";
  auto m = row_encoder::from_manifest(plain, "data/fm");
  ASSERT_FALSE(m);
  EXPECT_NE(m.err().to_string().find("data/fm: not a store imported from CSV"), std::string::npos);
}

}  // namespace
}  // namespace troupe::job
