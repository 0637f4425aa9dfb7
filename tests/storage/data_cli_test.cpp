// Runs `troupe data ...` for real: importers, inspect, and their errors on bad input.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "run_command.hpp"
#include "test_dir.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::storage {
namespace {

using testing::temp_dir;

using test_util::command_result;

// stdout and stderr together.
command_result run(const std::string& args) {
  return test_util::run_troupe(args);
}

const char* criteo_line =
    "1\t1\t2\t\t4\t5\t6\t7\t8\t9\t10\t11\t12\t13\ta\tb\tc\td\te\tf\t0a\t0b\t0c\t0d\t0e\t0f\t1a\t1b\t1c\t1d\t1"
    "e\t1f\t"
    "2a\t2b\t2c\t2d\t2e\t2f\t3a\t\n";

TEST(DataCli, SynthCtrThenInspect) {
  temp_dir d;
  auto r = run("data synth-ctr --rows 500 --fields 5 --vocab 100 --seed 9 --out " + d.sub("s"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto s = record_store::open(d.sub("s"));
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(s->count(), 500u);
  EXPECT_EQ(s->info().schema.sparse_fields, 5u);
  EXPECT_EQ(s->info().schema.buckets_per_field, 100u);
  auto rec = s->read(499);
  ASSERT_TRUE(rec);
  for (std::size_t f = 0; f < 5; ++f) EXPECT_EQ(rec->sparse[f] / 100, f) << "field-scoped ids";
  auto i = run("data inspect " + d.sub("s") + " --records 2 --verify");
  ASSERT_EQ(i.code, 0) << i.out;
  EXPECT_NE(i.out.find("record_count = 500"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("record 1: label"), std::string::npos) << i.out;
  EXPECT_NE(i.out.find("verified: 500 records"), std::string::npos) << i.out;
}

TEST(DataCli, FashionMnistSlice) {
  temp_dir d;
  auto r = run("data import fashion-mnist --split t10k --max-rows 200 --out " + d.sub("fm"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto s = record_store::open(d.sub("fm"));
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(s->count(), 200u);
  EXPECT_EQ(s->info().schema.dense_dim, 784u);
  EXPECT_EQ(s->info().schema.image_shape, (std::vector<std::uint32_t>{1, 28, 28}));
  EXPECT_EQ(s->info().source, "fashion-mnist:t10k");
}

TEST(DataCli, CriteoImport) {
  temp_dir d;
  std::string file = d.sub("day.tsv");
  {
    std::ofstream f(file);
    for (int i = 0; i < 3; ++i) f << criteo_line;
  }
  auto r = run("data import criteo " + file + " --buckets 1000 --out " + d.sub("c"));
  ASSERT_EQ(r.code, 0) << r.out;
  auto s = record_store::open(d.sub("c"));
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(s->count(), 3u);
  EXPECT_EQ(s->info().schema.dense_dim, 13u);
  EXPECT_EQ(s->info().schema.sparse_fields, 26u);
}

TEST(DataCli, MalformedCriteoLineIsNamed) {
  temp_dir d;
  std::string file = d.sub("bad.tsv");
  {
    std::ofstream f(file);
    f << criteo_line << "1\t2\t3\n";
  }
  auto r = run("data import criteo " + file + " --out " + d.sub("c"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(file + ":2"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("Segmentation"), std::string::npos);
}

TEST(DataCli, MissingInputFilesAreNamed) {
  temp_dir d;
  auto r = run("data import criteo " + d.sub("absent.tsv") + " --out " + d.sub("c"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("absent.tsv"), std::string::npos) << r.out;
  auto f = run("data import fashion-mnist --from " + d.sub("nowhere") + " --out " + d.sub("fm"));
  EXPECT_EQ(f.code, 1) << f.out;
  EXPECT_NE(f.out.find("nowhere"), std::string::npos) << f.out;
}

// A gzip file cut short (its trailer, or half of it) is an error naming the file, not a shorter
// dataset: zlib hands back what it decoded and reports the end only when asked.
TEST(DataCli, TruncatedGzipIsAnErrorNamingTheFile) {
  temp_dir d;
  const std::string tsv = d.sub("day.tsv");
  {
    std::ofstream out(tsv);
    for (int i = 0; i < 2000; ++i) out << criteo_line;
  }
  ASSERT_EQ(std::system(("gzip -k " + tsv).c_str()), 0);
  const std::string gz = tsv + ".gz";
  const auto size = std::filesystem::file_size(gz);
  auto whole = run("data import criteo " + gz + " --out " + d.sub("whole"));
  ASSERT_EQ(whole.code, 0) << whole.out;
  EXPECT_NE(whole.out.find("2000 records"), std::string::npos) << whole.out;
  for (auto keep : {size - 8, size / 2}) {  // no trailer; half the stream
    const std::string cut = d.sub("cut-" + std::to_string(keep) + ".tsv.gz");
    std::filesystem::copy_file(gz, cut);
    std::filesystem::resize_file(cut, keep);
    auto r = run("data import criteo " + cut + " --out " + d.sub("out-" + std::to_string(keep)));
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find(cut), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  }
}

TEST(DataCli, TruncatedIdxFileIsNamed) {
  temp_dir d;
  // An images file cut short: a valid header and too few pixels.
  std::string dir = d.sub("idx");
  std::filesystem::create_directories(dir);
  {
    std::ofstream img(dir + "/train-images-idx3-ubyte", std::ios::binary);
    const unsigned char hdr[16] = {0, 0, 8, 3, 0, 0, 0, 10, 0, 0, 0, 28, 0, 0, 0, 28};
    img.write(reinterpret_cast<const char*>(hdr), 16);
    img << std::string(1000, '\x10');
    std::ofstream lbl(dir + "/train-labels-idx1-ubyte", std::ios::binary);
    const unsigned char lh[8] = {0, 0, 8, 1, 0, 0, 0, 10};
    lbl.write(reinterpret_cast<const char*>(lh), 8);
    lbl << std::string(10, '\x01');
  }
  auto r = run("data import fashion-mnist --from " + dir + " --out " + d.sub("fm"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("train-images"), std::string::npos) << r.out;
}

TEST(DataCli, InspectRejectsNonStoresAndCorruptRecords) {
  temp_dir d;
  auto r = run("data inspect " + d.sub("none"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("not a record store"), std::string::npos) << r.out;
  ASSERT_EQ(run("data synth-ctr --rows 50 --fields 2 --vocab 10 --out " + d.sub("s")).code, 0);
  {
    auto env = lmdb_env::open(d.sub("s"));
    ASSERT_TRUE(env);
    auto db = (*env)->open_db("records", MDB_INTEGERKEY);
    ASSERT_TRUE(db);
    std::uint64_t idx = 42;
    ASSERT_TRUE((*env)->write([&](write_txn& w) {
      return w.put(*db, std::string_view(reinterpret_cast<const char*>(&idx), 8), "short");
    }));
  }
  auto v = run("data inspect " + d.sub("s") + " --verify");
  EXPECT_EQ(v.code, 1) << v.out;
  EXPECT_NE(v.out.find("record 42"), std::string::npos) << v.out;
}

TEST(DataCli, ExistingStoreIsNotOverwritten) {
  temp_dir d;
  ASSERT_EQ(run("data synth-ctr --rows 10 --out " + d.sub("s")).code, 0);
  auto r = run("data synth-ctr --rows 10 --out " + d.sub("s"));
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("already holds a store"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace troupe::storage
