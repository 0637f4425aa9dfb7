// `troupe data import csv` on data as users have it (issue #44, item 5): string labels, NaN and NA
// cells, standardized columns, an exact test split, and what the manifest keeps for reading a raw
// row later.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "csv_fixture.hpp"
#include "run_command.hpp"
#include "troupe/job/csv_import.hpp"
#include "troupe/nn/data/readers.hpp"

namespace troupe::job {
namespace {

namespace fs = std::filesystem;

class CsvUsers : public testing::csv_fixture {
 protected:
  CsvUsers() : csv_fixture("csv-users") {}
};

using testing::records;

std::vector<float> labels(const std::string& dir) {
  std::vector<float> out;
  for (const auto& r : records(dir)) out.push_back(r.label);
  return out;
}

storage::manifest manifest_of(const std::string& dir) {
  auto s = storage::record_store::open(dir);
  EXPECT_TRUE(s) << s.err().to_string();
  return s ? s->info() : storage::manifest{};
}

TEST_F(CsvUsers, StringLabelsAreClassesInSortedOrderAndKeepTheirNames) {
  auto o = csv("x,y\n1,cat\n2,dog\n3,bird\n4, cat \n");
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->num_classes, 3u);
  EXPECT_EQ(r->class_names, (std::vector<std::string>{"bird", "cat", "dog"}));
  EXPECT_EQ(labels(o.out), (std::vector<float>{1, 2, 0, 1}));
  auto m = manifest_of(o.out);
  EXPECT_EQ(m.schema.num_classes, 3u);
  ASSERT_TRUE(m.columns);
  EXPECT_EQ(m.columns->class_names, r->class_names) << "the names are in the manifest for later readers";

  o = csv("x,y\n1,yes\n2,no\n3,yes\n", "binary");
  r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->num_classes, 2u);
  EXPECT_EQ(r->class_names, (std::vector<std::string>{"no", "yes"}));
  EXPECT_EQ(labels(o.out), (std::vector<float>{1, 0, 1}));
}

TEST_F(CsvUsers, NumericLabelsKeepTheirMeaningOtherNumbersSortByValue) {
  auto o = csv("x,y\n1,0\n2,2\n3,1\n");
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_TRUE(r->class_names.empty()) << "class ids are not names";
  EXPECT_EQ(r->num_classes, 3u);
  EXPECT_EQ(labels(o.out), (std::vector<float>{0, 2, 1}));
  EXPECT_TRUE(manifest_of(o.out).columns->class_names.empty());
  // -1/+1 (a binary convention) and numpy's floats: classes in the order of their values.
  o = csv("x,y\n1,+1\n2,-1\n", "signs");
  r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->class_names, (std::vector<std::string>{"-1", "+1"}));
  EXPECT_EQ(labels(o.out), (std::vector<float>{1, 0}));
  o = csv("x,y\n1,10.0\n2,2.0\n3,1.0e+00\n", "floats");
  r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->class_names, (std::vector<std::string>{"1.0e+00", "2.0", "10.0"}));
}

TEST_F(CsvUsers, LabelProblemsNameLineAndColumn) {
  std::string many = "x,y\n";
  for (int i = 0; i <= 65536; ++i) many += "1,c" + std::to_string(i) + "\n";
  auto e = refused(csv(many));
  EXPECT_NE(e.find(":65538: column 'y' (2): label 'c65536' is one class more than 65536"), std::string::npos)
      << e;
  e = refused(csv("x,y\n1,caf\xe9\n", "latin1"));
  EXPECT_NE(e.find("latin1.csv:2: column 'y' (2): label is not UTF-8 text"), std::string::npos) << e;
  // One class name on every row: nothing to classify; it made a model predict and evaluate refused.
  e = refused(csv("x,y\n1,a\n2,a\n", "one-name"));
  EXPECT_NE(
      e.find(
          "one-name.csv: column 'y' (2): every row's label is 'a': a classifier needs rows of at least two "
          "classes"),
      std::string::npos)
      << e;
  e = refused(csv("x,caf\xe9,y\n1,2,a\n", "latin1-header"));
  EXPECT_NE(e.find("header: the name of column 2 is not UTF-8 text"), std::string::npos) << e;
}

// troupe trains classifiers: a regression target (fractional numbers, nearly all distinct) became
// one class per value (4,867 classes for 5,000 rows) and a job that ended "ok" at chance accuracy.
// It is refused; class ids that leave a class empty or are nearly all distinct are noted.
TEST_F(CsvUsers, AContinuousTargetIsRefusedAndOddClassIdsAreNoted) {
  std::string prices = "x,y\n";
  for (int i = 0; i < 300; ++i) prices += std::to_string(i) + "," + std::to_string(i) + ".25\n";
  auto e = refused(csv(prices, "prices"));
  EXPECT_NE(e.find("column 'y' (2): 300 distinct numbers in 300 rows"), std::string::npos) << e;
  EXPECT_NE(e.find("looks like a continuous target"), std::string::npos) << e;
  // Few fractional values are classes (half-star ratings), and whole numbers as text are too.
  auto r = import_csv(csv("x,y\n1,0.5\n2,1.5\n3,0.5\n4,2.5\n", "half-stars"));
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->class_names, (std::vector<std::string>{"0.5", "1.5", "2.5"}));
  EXPECT_TRUE(r->notes.empty());
  // Ids 1 and 2: three classes, class 0 without rows.
  r = import_csv(csv("x,y\n1,1\n2,2\n3,1\n", "one-two"));
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->num_classes, 3u);
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("class 0 has no rows"), std::string::npos) << r->notes[0];
  EXPECT_NE(r->notes[0].find("number the labels from 0 for one of 2"), std::string::npos) << r->notes[0];
  std::string ids = "x,y\n";
  for (int i = 0; i < 200; ++i) ids += std::to_string(i) + "," + std::to_string(i * 3) + "\n";
  r = import_csv(csv(ids, "ids"));
  ASSERT_TRUE(r) << r.err().to_string();
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("200 distinct class ids in 200 rows: is this a continuous target?"),
            std::string::npos)
      << r->notes[0];
  r = import_csv(csv("x,y\n1,0\n2,1\n3,2\n", "plain-ids"));
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_TRUE(r->notes.empty()) << r->notes[0];
}

// A column of values far past the others' scale trained a job "ok" at a test loss of 1e10 with no
// word: the import notes it (and not once --standardize scales it).
TEST_F(CsvUsers, ColumnsOfAHugeScaleAreNotedUnlessStandardized) {
  std::string text = "x,big,y\n";
  for (int i = 0; i < 50; ++i)
    text += std::to_string(i % 7) + "," + std::to_string(i * 1e5) + "," + (i % 2 ? "a" : "b") + "\n";
  auto r = import_csv(csv(text, "huge"));
  ASSERT_TRUE(r) << r.err().to_string();
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_NE(r->notes[0].find("1 dense column(s) of values far past 1e4: big (up to 4.9e+06)"),
            std::string::npos)
      << r->notes[0];
  EXPECT_NE(r->notes[0].find("--standardize"), std::string::npos) << r->notes[0];
  auto o = csv(text, "huge-standardized");
  o.standardize.emplace();
  r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_TRUE(r->notes.empty()) << r->notes[0];
}

TEST_F(CsvUsers, NanTokensAreMissingValues) {
  const std::string rows = "x,y,z,c\n1,0,NaN,NA\nnan,1,2,b\nNA,0,N/A,b\n-nan,1,null,b\n7,1,8,b\n";
  const std::string text = rows + "5,NaN,1,b\n";
  auto o = csv(text);
  o.sparse = {"c"};
  auto e = refused(o);
  EXPECT_NE(e.find(":2: column 'z' (3): missing value 'NaN' (--missing zero, mean or skip-row accepts it)"),
            std::string::npos)
      << e;
  o.missing = missing_policy::zero;
  e = refused(o);
  EXPECT_NE(e.find(":7: column 'y' (2): missing label 'NaN' (--missing skip-row accepts it)"),
            std::string::npos)
      << e;
  o = csv(rows, "zero");
  o.missing = missing_policy::zero;
  o.sparse = {"c"};
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->filled_missing, 6u) << "NaN, nan, NA, N/A, -nan, null in the dense columns";
  auto recs = records(o.out);
  ASSERT_EQ(recs.size(), 5u);
  EXPECT_EQ(recs[0].dense, (std::vector<float>{1, 0}));
  EXPECT_EQ(recs[2].dense, (std::vector<float>{0, 0}));
  EXPECT_EQ(recs[0].sparse[0], nn::category_id("NA", 0, 1000)) << "NA in a sparse column is text (Namibia)";
  o = csv(text, "skip");
  o.missing = missing_policy::skip_row;
  o.sparse = {"c"};
  r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->skipped_missing, 5u);
  EXPECT_EQ(r->filled_missing, 0u);
  EXPECT_EQ(labels(o.out), std::vector<float>{1});
}

TEST_F(CsvUsers, InfinityIsStillRefused) {
  auto e = refused(csv("x,y\ninf,1\n"));
  EXPECT_NE(e.find(":2: column 'x' (1): 'inf' is not a number"), std::string::npos) << e;
  // Past even a double's range: beyond FP32's (it said "is not a number"); so is past FP32's.
  e = refused(csv("x,y\n1e309,1\n", "huge"));
  EXPECT_NE(e.find(":2: column 'x' (1): '1e309' is beyond FP32's range"), std::string::npos) << e;
  e = refused(csv("x,y\n-4e38,1\n", "large"));
  EXPECT_NE(e.find(":2: column 'x' (1): '-4e38' is beyond FP32's range"), std::string::npos) << e;
}

// Too small for FP32 is its nearest value, as numpy's float32() reads it: 0, or a subnormal (1e-320
// was refused as "beyond FP32's range (about -3.4e38 to 3.4e38)").
TEST_F(CsvUsers, ValuesTooSmallForFp32AreItsNearestValue) {
  auto o = csv("x,y\n1e-320,1\n-1e-400,0\n1e-40,1\n2,0\n");
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  auto recs = records(o.out);
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].dense[0], 0.f);
  EXPECT_EQ(recs[1].dense[0], 0.f);
  EXPECT_TRUE(std::signbit(recs[1].dense[0])) << "-1e-400 is -0";
  EXPECT_EQ(recs[2].dense[0], static_cast<float>(1e-40L)) << "a subnormal FP32 value";
  EXPECT_GT(recs[2].dense[0], 0.f);
  EXPECT_EQ(recs[3].dense[0], 2.f);
}

std::string rows_text(int n) {
  std::string text = "x,y\n";
  for (int i = 0; i < n; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  return text;
}

std::set<float> xs(const std::string& dir) {
  std::set<float> out;
  for (const auto& r : records(dir)) out.insert(r.dense[0]);
  return out;
}

TEST_F(CsvUsers, TheSplitIsExactAndFollowsTheSeed) {
  auto o = csv(rows_text(1000));
  o.test_fraction = 0.2;
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->test.record_count, 200u);
  EXPECT_EQ(r->train.record_count, 800u);
  EXPECT_EQ(r->passes, 2u);
  auto again = csv(rows_text(1000), "again");
  again.test_fraction = 0.2;
  ASSERT_TRUE(import_csv(again));
  EXPECT_EQ(xs(again.out + "/test"), xs(o.out + "/test")) << "the same file and seed: the same split";
  auto other = csv(rows_text(1000), "other");
  other.test_fraction = 0.2;
  other.split_seed = 7;
  ASSERT_TRUE(import_csv(other));
  EXPECT_EQ(xs(other.out + "/test").size(), 200u);
  EXPECT_NE(xs(other.out + "/test"), xs(o.out + "/test")) << "another seed: another split";
  auto small = csv(rows_text(7), "small");
  small.test_fraction = 0.25;
  r = import_csv(small);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->test.record_count, 2u) << "round(0.25 x 7)";
  auto none = csv(rows_text(3), "none");
  none.test_fraction = 0.1;
  EXPECT_NE(refused(none).find("--test-fraction 0.100000 of 3 rows leaves the test store empty"),
            std::string::npos);
}

double mean_of(const std::vector<storage::record>& recs, std::size_t k) {
  double s = 0;
  for (const auto& r : recs) s += r.dense[k];
  return s / static_cast<double>(recs.size());
}

double std_of(const std::vector<storage::record>& recs, std::size_t k) {
  const double m = mean_of(recs, k);
  double s = 0;
  for (const auto& r : recs) s += (r.dense[k] - m) * (r.dense[k] - m);
  return std::sqrt(s / static_cast<double>(recs.size()));
}

TEST_F(CsvUsers, StandardizeUsesTheTrainingRowsAndKeepsTheirStatistics) {
  std::string text = "a,b,k,y\n";
  for (int i = 0; i < 400; ++i)
    text += std::to_string(1000 + i * 3) + "," + std::to_string((i * 37) % 11) + ",4," +
            std::to_string(i % 2) + "\n";
  auto o = csv(text);
  o.test_fraction = 0.25;
  o.standardize = std::vector<std::string>{};
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->passes, 3u) << "a split and standardization: a pass for the training rows' statistics";
  ASSERT_EQ(r->standardized.size(), 3u);
  EXPECT_EQ(r->constant_columns, std::vector<std::string>{"k"});
  auto train = records(o.out + "/train");
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_NEAR(mean_of(train, k), 0, 1e-5) << "column " << k;
    EXPECT_NEAR(std_of(train, k), 1, 1e-5) << "column " << k;
  }
  EXPECT_EQ(train[0].dense[2], 0.f) << "a constant column is centred only";
  EXPECT_NE(r->standardized[0].mean, 1598.5) << "the mean of every row's a: the test rows are not in it";
  auto m = manifest_of(o.out + "/test");
  ASSERT_TRUE(m.columns);
  EXPECT_EQ(m.columns->standardize, r->standardized) << "kept for rows read later";
  // Some columns only; without a split the first pass takes the statistics.
  auto some = csv(text, "some");
  some.standardize = std::vector<std::string>{"b"};
  r = import_csv(some);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->passes, 2u);
  ASSERT_EQ(r->standardized.size(), 1u);
  EXPECT_EQ(r->standardized[0].column, "b");
  EXPECT_EQ(records(some.out)[0].dense[0], 1000.f) << "a column not named stays as it was";
  auto bad = csv(text, "bad");
  bad.standardize = std::vector<std::string>{"y"};
  EXPECT_NE(refused(bad).find("--standardize: 'y' is not a dense column (dense: a, b, k)"),
            std::string::npos);
}

// --missing mean: a missing dense value reads as the mean of its column's present values in the
// training rows, and standardizing then sees it as that mean (scikit-learn's SimpleImputer with
// strategy "mean", then StandardScaler: the filled cell standardizes to 0).
TEST_F(CsvUsers, MeanFillsAMissingValueWithItsColumnsMeanOfTheTrainingRows) {
  // a: 1..10 without rows 3 and 7; b: 2, 4, ..., 20 without row 5; c never missing.
  std::string text = "a,b,c,y\n";
  for (int i = 1; i <= 10; ++i)
    text += (i == 3 || i == 7 ? "" : std::to_string(i)) + "," + (i == 5 ? "NA" : std::to_string(2 * i)) +
            "," + std::to_string(i % 3) + "," + std::to_string(i % 2) + "\n";
  auto o = csv(text);
  o.missing = missing_policy::mean;
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->passes, 2u) << "the means are taken in the first pass";
  EXPECT_EQ(r->filled_missing, 3u);
  const double mean_a = (55.0 - 3 - 7) / 8, mean_b = (110.0 - 10) / 9, mean_c = 10.0 / 10;
  ASSERT_EQ(r->fill.size(), 3u);
  EXPECT_DOUBLE_EQ(r->fill[0], mean_a);
  EXPECT_DOUBLE_EQ(r->fill[1], mean_b);
  EXPECT_DOUBLE_EQ(r->fill[2], mean_c);
  auto recs = records(o.out);
  ASSERT_EQ(recs.size(), 10u);
  EXPECT_EQ(recs[2].dense[0], static_cast<float>(mean_a));
  EXPECT_EQ(recs[4].dense[1], static_cast<float>(mean_b));
  EXPECT_EQ(recs[3].dense[0], 4.f) << "a present value is as it was";
  auto m = manifest_of(o.out);
  ASSERT_TRUE(m.columns);
  EXPECT_EQ(m.columns->missing, "mean");
  EXPECT_EQ(m.columns->fill, r->fill) << "kept for rows read later, bit for bit";
  // The same rows --like that format: filled alike, and counted (it said "filled 0").
  auto again = csv(text, "like");
  auto l = import_csv_like(again, *m.columns, 2);
  ASSERT_TRUE(l) << l.err().to_string();
  EXPECT_EQ(l->filled_missing, 3u);
  auto like_recs = records(again.out);
  ASSERT_EQ(like_recs.size(), 10u);
  EXPECT_EQ(like_recs[2].dense[0], static_cast<float>(mean_a));
  // A label past the model's 2 classes is refused, naming its line; no store is left.
  auto past = csv("a,b,c,y\n1,2,3,1\n3,4,5,2\n", "past");
  auto p = import_csv_like(past, *m.columns, 2);
  ASSERT_FALSE(p);
  EXPECT_NE(p.err().to_string().find(":3: column 'y' (4): label '2' is not a class id of the 2 classes"),
            std::string::npos)
      << p.err().to_string();
  EXPECT_FALSE(fs::exists(fs::path(past.out) / "data.mdb"));

  // Standardized with a split: the training rows' means (not every row's), and a filled cell is 0.
  std::string many = "a,b,y\n";
  double all_a = 0;
  int present_a = 0;
  for (int i = 0; i < 400; ++i) {
    const bool gap = i % 7 == 2;
    if (!gap) all_a += 1000 + i * 3, ++present_a;
    many += (gap ? std::string("null") : std::to_string(1000 + i * 3)) + "," +
            (i % 11 == 4 ? std::string("") : std::to_string((i * 37) % 11)) + "," + std::to_string(i % 2) +
            "\n";
  }
  auto s = csv(many, "split");
  s.missing = missing_policy::mean;
  s.test_fraction = 0.25;
  s.standardize = std::vector<std::string>{"a"};
  r = import_csv(s);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->passes, 3u);
  ASSERT_EQ(r->standardized.size(), 1u);
  EXPECT_DOUBLE_EQ(r->standardized[0].mean, r->fill[0]) << "the standardization's mean is the fill";
  EXPECT_NE(r->fill[0], all_a / present_a) << "the test rows are not in the mean";
  auto train = records(s.out + "/train");
  EXPECT_NEAR(mean_of(train, 0), 0, 1e-5);
  EXPECT_NEAR(std_of(train, 0), 1, 1e-5)
      << "the deviation is over every training row, a filled one adding none";
  EXPECT_NEAR(mean_of(train, 1), r->fill[1], 1e-4) << "filled with their mean, the rows keep it";
  std::size_t zeros = 0;
  for (const auto& rec : train) zeros += std::fabs(rec.dense[0]) < 1e-6f;
  EXPECT_GT(zeros, 30u) << "a filled cell of a standardized column reads as 0";

  // A column with no value to take the mean of, and a missing label, are refused.
  EXPECT_NE(refused([&] {
              auto e = csv("a,b,y\n1,,0\n2,NaN,1\n", "empty");
              e.missing = missing_policy::mean;
              return e;
            }())
                .find("column 'b': no value in the rows to take the mean of (--missing mean)"),
            std::string::npos);
  auto nolabel = csv("a,y\n1,0\n2,\n", "label");
  nolabel.missing = missing_policy::mean;
  EXPECT_NE(refused(nolabel).find(":3: column 'y' (2): missing label (--missing skip-row accepts it)"),
            std::string::npos);
}

TEST_F(CsvUsers, APipeIsRefusedForItIsReadMoreThanOnce) {
  auto fifo = path("fifo.csv");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto o = csv("x,y\n");
  o.file = fifo;
  EXPECT_NE(refused(o).find("not a regular file: the import reads it more than once"), std::string::npos);
}

TEST_F(CsvUsers, TheManifestKeepsWhatReadingARawRowTakes) {
  auto o = csv("id;x1;y;city;x2\n1;2;b;p;3\n2;4;c;q;5\n");
  o.delimiter = ';';
  o.sparse = {"city"};
  o.dense = std::vector<std::string>{"x2", "x1"};
  o.missing = missing_policy::zero;
  ASSERT_TRUE(import_csv(o));
  auto m = manifest_of(o.out);
  ASSERT_TRUE(m.columns);
  const auto& f = *m.columns;
  EXPECT_EQ(f.header, (std::vector<std::string>{"id", "x1", "y", "city", "x2"}));
  EXPECT_EQ(f.label, "y");
  EXPECT_EQ(f.dense, (std::vector<std::string>{"x2", "x1"}));
  EXPECT_EQ(f.sparse, std::vector<std::string>{"city"});
  EXPECT_EQ(f.delimiter, ';');
  EXPECT_EQ(f.missing, "zero");
  EXPECT_EQ(f.hash, "troupe-category-v1");
  EXPECT_EQ(f.buckets_per_field, 1000u);
  EXPECT_EQ(f.class_names, (std::vector<std::string>{"b", "c"}));
}

}  // namespace
}  // namespace troupe::job
