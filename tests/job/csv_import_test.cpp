// `troupe data import csv`'s importer (job/csv_import.hpp): a small CSV read back record by record,
// and every kind of bad input with its message; plus job files that name imported stores.
#include "troupe/job/csv_import.hpp"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "csv_fixture.hpp"
#include "run_command.hpp"
#include "troupe/job/data.hpp"
#include "troupe/job/job_file.hpp"
#include "troupe/nn/data/readers.hpp"

namespace troupe::job {
namespace {

namespace fs = std::filesystem;

class CsvImport : public testing::csv_fixture {
 protected:
  CsvImport() : csv_fixture("csv") {}
};

using testing::records;

TEST_F(CsvImport, ValuesLabelsAndIdsReadBack) {
  auto o = csv("id,x1,y,city,x2\n7,1.5,1,paris,-2\n8,\"2e3\",0,,0.25\n9, 3 ,1,\"new york, ny\",4\n");
  o.sparse = {"city"};
  o.dense = std::vector<std::string>{"x1", "x2"};
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->train_dir, o.out);
  EXPECT_EQ(r->ignored_columns, std::vector<std::string>{"id"});
  EXPECT_EQ(r->num_classes, 2u);
  auto s = storage::record_store::open(o.out);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->info().schema.dense_dim, 2u);
  EXPECT_EQ(s->info().schema.sparse_fields, 1u);
  EXPECT_EQ(s->info().schema.num_classes, 2u);
  EXPECT_EQ(s->info().schema.buckets_per_field, 1000u);
  EXPECT_NE(s->info().source.find("dense=x1,x2 sparse=city"), std::string::npos) << s->info().source;
  auto recs = records(o.out);
  ASSERT_EQ(recs.size(), 3u);
  EXPECT_EQ(recs[0].label, 1.f);
  EXPECT_EQ(recs[0].dense, (std::vector<float>{1.5f, -2.f}));
  EXPECT_EQ(recs[1].dense, (std::vector<float>{2000.f, 0.25f}));
  EXPECT_EQ(recs[2].dense, (std::vector<float>{3.f, 4.f})) << "spaces around a number are allowed";
  EXPECT_EQ(recs[0].sparse[0], nn::category_id("paris", 0, 1000));
  EXPECT_EQ(recs[1].sparse[0], 0u) << "an empty sparse field is the field's missing id";
  EXPECT_EQ(recs[2].sparse[0], nn::category_id("new york, ny", 0, 1000));
  EXPECT_TRUE(verify_store(o.out)) << "checked the way built-in stores are";
}

TEST_F(CsvImport, DenseDefaultsToTheRestAndClassesCountFromTheLabels) {
  auto o = csv("a;y;b;c\n1;0;2;u\n3;2;4;v\n5;1;6;u\n");
  o.delimiter = ';';
  o.sparse = {"c"};
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->dense_columns, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r->num_classes, 3u);
  auto m = storage::record_store::open(o.out);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->info().schema.num_classes, 3u);
  auto info = info_of(m->info(), "t");
  EXPECT_EQ(info.num_classes, 3u);
  auto recs = records(o.out);
  EXPECT_EQ(recs[0].sparse[0], recs[2].sparse[0]);
  EXPECT_NE(recs[0].sparse[0], recs[1].sparse[0]);
}

TEST_F(CsvImport, TestFractionSplitsTheSameWayEveryTime) {
  std::string text = "x,y\n";
  for (int i = 0; i < 1000; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  auto o = csv(text);
  o.test_fraction = 0.2;
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->train_dir, path("out/train"));
  EXPECT_EQ(r->test_dir, path("out/test"));
  EXPECT_EQ(r->train.record_count + r->test.record_count, 1000u);
  EXPECT_EQ(r->test.record_count, 200u) << "round(0.2 x 1000), exactly";
  auto again = o;
  again.out = path("again");
  auto r2 = import_csv(again);
  ASSERT_TRUE(r2);
  EXPECT_EQ(records(r2->test_dir), records(r->test_dir));
}

TEST_F(CsvImport, HeaderProblems) {
  EXPECT_NE(refused(csv("")).find("empty: a header row naming the columns is required"), std::string::npos);
  EXPECT_NE(refused(csv("1,2\n3,4\n")).find("a header row naming the columns is required"),
            std::string::npos);
  EXPECT_NE(refused(csv("x,y,x\n1,2,3\n")).find("column name 'x' appears twice (columns 1 and 3)"),
            std::string::npos);
  EXPECT_NE(refused(csv("x, ,label\n1,2,0\n")).find("header: column 2 has no name"), std::string::npos);
  EXPECT_NE(refused(csv("x," + std::string(2000, 'n') + ",label\n1,2,0\n"))
                .find("header: the name of column 2 is 2000 bytes long (at most 1024)"),
            std::string::npos);
  auto o = csv("x,label\n1,0\n");
  EXPECT_NE(refused(o).find("label column 'y': no such column (the header has: x, label)"),
            std::string::npos);
  // A name but for case and blanks around it: the header's own spelling suggested.
  o = csv(" Age ,y\n1,0\n");
  o.dense = std::vector<std::string>{"age"};
  EXPECT_NE(
      refused(o).find("dense column 'age': no such column; did you mean ' Age '? (the header has:  Age , y)"),
      std::string::npos)
      << refused(o);
  o = csv("x,y,z\n1,0,a\n");
  o.sparse = {"z", "w"};
  EXPECT_NE(refused(o).find("sparse column 'w': no such column"), std::string::npos);
  o.sparse = {"y"};
  EXPECT_NE(refused(o).find("column 'y' is given as label and as sparse"), std::string::npos);
}

TEST_F(CsvImport, BadValuesNameLineAndColumn) {
  auto o = csv("x,y,z\n1,0,2\n1,1,abc\n");
  auto e = refused(o);
  EXPECT_NE(e.find(o.file + ":3: column 'z' (3): 'abc' is not a number"), std::string::npos) << e;
  // A long cell is cut in the message (a 10 MB one made a 10 MB error line).
  e = refused(csv("x,y,z\n1,0,2\n1,1," + std::string(100000, 'q') + "\n"));
  EXPECT_NE(e.find("'" + std::string(60, 'q') + "...' (100000 bytes) is not a number"), std::string::npos)
      << e;
  EXPECT_LT(e.size(), 500u);
  e = refused(csv("x,y\nnan,1\n"));
  EXPECT_NE(e.find(":2: column 'x' (1): missing value 'nan'"), std::string::npos) << e;
}

TEST_F(CsvImport, MissingValuePolicies) {
  const std::string text = "x,y,z\n1,0,2\n,1,3\n4,,5\n6,1,7\n";
  auto e = refused(csv(text));
  EXPECT_NE(e.find(":3: column 'x' (1): missing value (--missing zero, mean or skip-row accepts it)"),
            std::string::npos)
      << e;
  auto o = csv(text);
  o.missing = missing_policy::zero;
  e = refused(o);
  EXPECT_NE(e.find(":4: column 'y' (2): missing label"), std::string::npos) << e;
  o = csv("x,y,z\n1,0,2\n,1,3\n");
  o.missing = missing_policy::zero;
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(records(o.out)[1].dense, (std::vector<float>{0.f, 3.f}));
  o = csv(text, "skip.csv");
  o.out = path("skip");
  o.missing = missing_policy::skip_row;
  r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->skipped_missing, 2u);
  EXPECT_EQ(r->train.record_count, 2u);
}

TEST_F(CsvImport, MalformedLinesAreCountedNeverDroppedSilently) {
  const std::string text = "x,y\n1,0\n1,2,3\n\"4,1\n5,1\n6\n7,0\n8,1,\n";
  auto o = csv(text);
  o.max_reported = 2;
  auto e = refused(o);
  EXPECT_NE(e.find("4 malformed lines (line 3: 3 fields, the header has 2; line 4: a quoted field"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("; ...); nothing imported (--skip-malformed drops them)"), std::string::npos) << e;
  o.skip_malformed = true;
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->malformed, 4u);
  EXPECT_EQ(r->examples.size(), 2u);
  EXPECT_EQ(r->train.record_count, 3u);
}

TEST_F(CsvImport, GzipInput) {
  auto gz = path("in.csv.gz");
  gzFile z = gzopen(gz.c_str(), "wb");
  ASSERT_NE(z, nullptr);
  gzputs(z, "x,y\n1,0\n2,1\n");
  gzclose(z);
  auto o = csv("unused");
  o.file = gz;
  auto r = import_csv(o);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->train.record_count, 2u);
  // Cut short: an error (io_error) naming the file, no store.
  auto cut = path("cut.csv.gz");
  fs::copy_file(gz, cut);
  fs::resize_file(cut, fs::file_size(gz) - 6);
  o.file = cut;
  o.out = path("cut");
  auto c = import_csv(o);
  ASSERT_FALSE(c);
  EXPECT_TRUE(c.err() == core_errc::io_error) << c.err().to_string();
  EXPECT_NE(c.err().to_string().find(cut + ": truncated"), std::string::npos) << c.err().to_string();
  EXPECT_FALSE(fs::exists(o.out));
}

TEST_F(CsvImport, AnExistingStoreIsNeverOverwrittenNorRemoved) {
  auto o = csv("x,y\n1,0\n");
  ASSERT_TRUE(import_csv(o));
  auto again = import_csv(o);
  ASSERT_FALSE(again);
  EXPECT_NE(again.err().to_string().find("already holds a store"), std::string::npos);
  EXPECT_EQ(records(o.out).size(), 1u) << "the first import is intact";
}

// A CSV of the label alone, or one whose every other column is left out, has no feature to learn
// from: refused naming the file, no store written (it was imported; the job then failed on "layer
// 'logits_sum' takes at least 1 inputs, got 0").
TEST_F(CsvImport, AnImportOfNoFeatureColumnIsRefused) {
  auto alone = csv("y\n1\n0\n1\n", "alone");
  auto r = import_csv(alone);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("no feature column (the header holds the label alone)"),
            std::string::npos)
      << r.err().to_string();
  EXPECT_FALSE(fs::exists(fs::path(alone.out) / "data.mdb"));
  auto none = csv("a,y\n1,1\n2,0\n", "none");
  none.dense = std::vector<std::string>{};
  r = import_csv(none);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("no feature column (--dense and --sparse name none"), std::string::npos)
      << r.err().to_string();
}

// A split import (OUT/train, OUT/test) into a directory holding an unsplit store, or the other way
// round, is refused too: before 2026-12-07 either wrote a second set of stores beside the first.
TEST_F(CsvImport, AnImportOfTheOtherLayoutIntoAStoresDirectoryIsRefused) {
  std::string text = "x,y\n";
  for (int i = 0; i < 40; ++i) text += std::to_string(i) + "," + std::to_string(i % 2) + "\n";
  auto whole = csv(text);
  ASSERT_TRUE(import_csv(whole));
  auto split = whole;
  split.test_fraction = 0.25;
  auto r = import_csv(split);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find(whole.out + ": already holds a store"), std::string::npos)
      << r.err().to_string();
  EXPECT_FALSE(fs::exists(fs::path(whole.out) / "train")) << "nothing written beside it";
  EXPECT_EQ(records(whole.out).size(), 40u);

  split.out = path("split");
  ASSERT_TRUE(import_csv(split));
  auto unsplit = whole;
  unsplit.out = split.out;
  r = import_csv(unsplit);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("already holds a store in train/"), std::string::npos)
      << r.err().to_string();
  EXPECT_FALSE(fs::exists(fs::path(split.out) / "data.mdb")) << "nothing written beside them";
}

TEST_F(CsvImport, JobFileStorePathsAreRelativeToTheJobFile) {
  auto job = path("jobs/a.toml");
  fs::create_directories(path("jobs"));
  std::ofstream(job) << "[data]\nsource = \"store\"\ntrain = \"../data/train\"\ntest = \"/abs/test\"\n";
  auto doc = read_job_file(job);
  ASSERT_TRUE(doc) << doc.err().to_string();
  auto spec = job_spec::read(*doc);
  ASSERT_TRUE(spec) << spec.err().to_string();
  EXPECT_EQ(spec->nn.data.train_path, path("data/train"));
  EXPECT_EQ(spec->nn.data.test_path, "/abs/test");
  EXPECT_NE(doc->to_toml().find(path("data/train")), std::string::npos) << "the job directory's copy too";
}

}  // namespace
}  // namespace troupe::job
