#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

#include "test_dir.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::storage {
namespace {

using testing::temp_dir;

record_schema small_schema() {
  return {3, 2, 10, {}};
}

record make(std::uint64_t i) {
  return {static_cast<float>(i % 10), {float(i), float(i) + 0.5f, -float(i)}, {i * 7, i * 13 + 1}};
}

void import(const std::string& dir, std::uint64_t n, writer_options o = {}) {
  auto w = record_writer::create(dir, small_schema(), "test", o);
  ASSERT_TRUE(w) << w.err().to_string();
  for (std::uint64_t i = 0; i < n; ++i) ASSERT_TRUE(w->append(make(i)));
  auto m = w->finish();
  ASSERT_TRUE(m) << m.err().to_string();
  EXPECT_EQ(m->record_count, n);
}

// Overwrites the raw value of one record (simulates a bad writer or a bit flip).
void put_raw(const std::string& dir, std::uint64_t index, std::string value) {
  auto env = lmdb_env::open(dir);
  ASSERT_TRUE(env);
  auto db = (*env)->open_db("records", MDB_INTEGERKEY);
  ASSERT_TRUE(db);
  ASSERT_TRUE((*env)->write([&](write_txn& w) {
    return w.put(*db, std::string_view(reinterpret_cast<const char*>(&index), 8), value);
  }));
}

std::string get_raw(const std::string& dir, std::uint64_t index) {
  auto env = lmdb_env::open(dir);
  auto db = (*env)->open_db("records", MDB_INTEGERKEY);
  auto txn = (*env)->begin_read();
  auto v = txn->get(*db, std::string_view(reinterpret_cast<const char*>(&index), 8));
  return std::string(**v);
}

void put_manifest(const std::string& dir, const std::string& text) {
  auto env = lmdb_env::open(dir);
  ASSERT_TRUE(env);
  auto db = (*env)->open_db("meta");
  ASSERT_TRUE(db);
  ASSERT_TRUE((*env)->write([&](write_txn& w) { return w.put(*db, "manifest", text); }));
}

TEST(RecordStore, RoundTripReadScanBatch) {
  temp_dir d;
  writer_options o;
  o.txn_bytes = 1000;  // many transactions
  import(d.str(), 500, o);
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(s->count(), 500u);
  EXPECT_EQ(s->info().schema, small_schema());
  EXPECT_EQ(s->info().source, "test");
  auto r = s->read(123);
  ASSERT_TRUE(r);
  EXPECT_EQ(*r, make(123));
  std::uint64_t next = 490;
  auto n = s->scan(490, 100, [&](std::uint64_t i, const record& rec) {
    EXPECT_EQ(i, next++);
    EXPECT_EQ(rec, make(i));
    return true;
  });
  ASSERT_TRUE(n);
  EXPECT_EQ(*n, 10u);
  std::vector<record> batch;
  ASSERT_TRUE(s->read_batch(100, 32, batch));
  ASSERT_EQ(batch.size(), 32u);
  EXPECT_EQ(batch[31], make(131));
  auto stop = s->scan(0, 500, [](std::uint64_t i, const record&) { return i < 4; });
  ASSERT_TRUE(stop);
  EXPECT_EQ(*stop, 5u);
}

// A link where a store's lock file goes (another user's store, opened by root: `troupe data cache`
// listing a shared cache) is refused: LMDB wrote its lock header into the file the link named.
TEST(RecordStore, ALockFileThatIsALinkIsRefused) {
  temp_dir d;
  import(d.str(), 10, writer_options{});
  const std::string victim = d.str() + "/../victim-" + std::to_string(::getpid());
  std::ofstream(victim) << "precious";
  std::remove((d.str() + "/lock.mdb").c_str());
  ASSERT_EQ(::symlink(victim.c_str(), (d.str() + "/lock.mdb").c_str()), 0);
  auto s = record_store::open_read_only(d.str());
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().to_string().find("lock.mdb: not a regular file"), std::string::npos)
      << s.err().to_string();
  std::ifstream in(victim);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()), "precious");
  std::remove(victim.c_str());
}

TEST(RecordStore, ReadPastTheEndIsNotFound) {
  temp_dir d;
  import(d.str(), 5);
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s);
  auto r = s->read(5);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), storage_errc::not_found);
}

TEST(RecordStore, WrongShapeAppendNamesTheRecord) {
  temp_dir d;
  auto w = record_writer::create(d.str(), small_schema(), "test");
  ASSERT_TRUE(w);
  ASSERT_TRUE(w->append(make(0)));
  record bad = make(1);
  bad.dense.pop_back();
  auto r = w->append(bad);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("record 1"), std::string::npos) << r.err().to_string();
}

TEST(RecordStore, CreatingOverAnExistingStoreFails) {
  temp_dir d;
  import(d.str(), 3);
  auto w = record_writer::create(d.str(), small_schema(), "again");
  ASSERT_FALSE(w);
  EXPECT_EQ(w.err(), storage_errc::already_exists);
}

TEST(RecordStore, UnfinishedImportIsRefused) {
  temp_dir d;
  {
    writer_options o;
    o.txn_bytes = 100;
    auto w = record_writer::create(d.str(), small_schema(), "test", o);
    ASSERT_TRUE(w);
    for (int i = 0; i < 50; ++i) ASSERT_TRUE(w->append(make(i)));
    // no finish(): as if the importer died
  }
  auto s = record_store::open(d.str());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err(), storage_errc::bad_manifest);
  EXPECT_NE(s.err().to_string().find("did not finish"), std::string::npos) << s.err().to_string();
}

TEST(RecordStore, MissingStoreIsNotFound) {
  temp_dir d;
  auto s = record_store::open(d.sub("nothing"));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err(), storage_errc::not_found);
  EXPECT_NE(s.err().to_string().find("nothing"), std::string::npos);
}

TEST(RecordStore, TruncatedRecordNamesDirAndIndex) {
  temp_dir d;
  import(d.str(), 20);
  std::string v = get_raw(d.str(), 7);
  put_raw(d.str(), 7, v.substr(0, v.size() - 5));
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s);
  auto r = s->read(7);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), storage_errc::corrupt_record);
  auto text = r.err().to_string();
  EXPECT_NE(text.find(d.str()), std::string::npos) << text;
  EXPECT_NE(text.find("record 7"), std::string::npos) << text;
  EXPECT_NE(text.find("truncated"), std::string::npos) << text;
  auto n = s->scan(0, 20, [](std::uint64_t, const record&) { return true; });
  ASSERT_FALSE(n);
  EXPECT_NE(n.err().to_string().find("record 7"), std::string::npos);
}

TEST(RecordStore, FlippedByteFailsTheChecksum) {
  temp_dir d;
  import(d.str(), 20);
  std::string v = get_raw(d.str(), 11);
  v[9] ^= 0x40;
  put_raw(d.str(), 11, v);
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->read(10));
  auto r = s->read(11);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("record 11: checksum mismatch"), std::string::npos)
      << r.err().to_string();
}

TEST(RecordStore, RecordUnderTheWrongIndexFailsTheChecksum) {
  temp_dir d;
  import(d.str(), 20);
  put_raw(d.str(), 3, get_raw(d.str(), 4));
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s);
  auto r = s->read(3);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), storage_errc::corrupt_record);
}

TEST(RecordStore, CorruptionOnDiskIsDetected) {
  temp_dir d;
  import(d.str(), 20);
  // Find record 9's bytes in the data file and flip one of its label/feature bytes.
  std::string needle = get_raw(d.str(), 9);
  std::string file = d.sub("data.mdb");
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto at = bytes.find(needle);
  ASSERT_NE(at, std::string::npos);
  bytes[at + 6] ^= 0x01;
  {
    std::ofstream out(file, std::ios::binary | std::ios::in);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s) << s.err().to_string();
  auto r = s->read(9);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("record 9"), std::string::npos) << r.err().to_string();
}

TEST(RecordStore, TruncatedDataFileGivesErrorsNotCrashes) {
  temp_dir d;
  writer_options o;
  o.txn_bytes = 64 << 10;
  auto w = record_writer::create(d.str(), {200, 1, 10, {}, 0}, "t", o);
  ASSERT_TRUE(w);
  record r;
  r.dense.assign(200, 1.5f);
  r.sparse.assign(1, 3);
  for (int i = 0; i < 2000; ++i) ASSERT_TRUE(w->append(r));
  ASSERT_TRUE(w->finish());
  w = expected<record_writer>(error());  // closes the environment
  auto size = std::filesystem::file_size(d.sub("data.mdb"));
  std::filesystem::resize_file(d.sub("data.mdb"), size / 2);
  auto s = record_store::open(d.str());
  if (!s) {
    SUCCEED() << s.err().to_string();
    return;
  }
  auto n = s->scan(0, s->count(), [](std::uint64_t, const record&) { return true; });
  ASSERT_FALSE(n) << "half the pages are gone";
  EXPECT_NE(n.err().to_string().find(d.str()), std::string::npos) << n.err().to_string();
}

TEST(RecordStore, ManifestCountDisagreeingWithRecordsIsRefused) {
  temp_dir d;
  import(d.str(), 10);
  manifest m;
  m.schema = small_schema();
  m.record_count = 11;
  m.complete = true;
  put_manifest(d.str(), m.to_toml());
  auto s = record_store::open(d.str());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err(), storage_errc::bad_manifest);
  EXPECT_NE(s.err().to_string().find("manifest says 11 records"), std::string::npos) << s.err().to_string();
}

TEST(RecordStore, MalformedManifestNamesTheKey) {
  temp_dir d;
  import(d.str(), 10);
  put_manifest(d.str(),
               "format_version = 1\nrecord_count = \"ten\"\ncomplete = true\n[schema]\ndense_dim = "
               "3\nsparse_fields = 2\n");
  auto s = record_store::open(d.str());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err(), storage_errc::bad_manifest);
  EXPECT_NE(s.err().to_string().find("record_count"), std::string::npos) << s.err().to_string();
  // The file is named once (it was twice: before the reader's words and in them).
  const auto text = s.err().to_string();
  const auto file = d.str() + "/manifest";
  ASSERT_NE(text.find(file), std::string::npos) << text;
  EXPECT_EQ(text.find(file, text.find(file) + 1), std::string::npos) << text;
  put_manifest(d.str(), "this is [not toml");
  s = record_store::open(d.str());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err(), storage_errc::bad_manifest);
}

TEST(RecordStore, OtherFormatVersionIsRefused) {
  temp_dir d;
  import(d.str(), 10);
  manifest m;
  m.schema = small_schema();
  m.record_count = 10;
  m.complete = true;
  m.format_version = 99;
  put_manifest(d.str(), m.to_toml());
  auto s = record_store::open(d.str());
  ASSERT_FALSE(s);
  EXPECT_EQ(s.err(), storage_errc::version_mismatch) << s.err().to_string();
}

TEST(RecordStore, SchemaThatDisagreesWithTheRecordsIsCaughtOnRead) {
  temp_dir d;
  import(d.str(), 10);
  manifest m;
  m.schema = {4, 2, 10, {}};
  m.record_count = 10;
  m.complete = true;
  put_manifest(d.str(), m.to_toml());
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s);
  auto r = s->read(0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), storage_errc::corrupt_record);
}

TEST(RecordStore, ImportGrowsTheMapPastItsInitialSize) {
  temp_dir d;
  writer_options o;
  o.initial_map_size = 1 << 20;  // 1 MiB
  o.txn_bytes = 4 << 20;
  auto w = record_writer::create(d.str(), {1000, 0, 0, {}}, "big", o);
  ASSERT_TRUE(w) << w.err().to_string();
  record r;
  r.dense.assign(1000, 0.25f);
  for (int i = 0; i < 8000; ++i) {  // ~32 MB of records
    r.label = static_cast<float>(i);
    ASSERT_TRUE(w->append(r)) << i;
  }
  ASSERT_TRUE(w->finish());
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(s->count(), 8000u);
  auto last = s->read(7999);
  ASSERT_TRUE(last);
  EXPECT_EQ(last->label, 7999.0f);
}

TEST(Manifest, RoundTripsThroughToml) {
  manifest m;
  m.schema = {784, 0, 10, {1, 28, 28}};
  m.record_count = 60000;
  m.source = "fashion-mnist:\"train\"";
  m.complete = true;
  auto p = manifest::parse(m.to_toml(), "x");
  ASSERT_TRUE(p) << p.err().to_string();
  EXPECT_EQ(p->schema, m.schema);
  EXPECT_EQ(p->record_count, 60000u);
  EXPECT_EQ(p->source, m.source);
  EXPECT_TRUE(p->complete);
}

TEST(Manifest, ImageShapeMustMatchDenseDim) {
  auto p = manifest::parse(
      "format_version = 1\nrecord_count = 1\n[schema]\ndense_dim = 10\nsparse_fields = 0\nimage_shape = [2, "
      "3]\n",
      "m");
  ASSERT_FALSE(p);
  EXPECT_NE(p.err().to_string().find("image_shape"), std::string::npos) << p.err().to_string();
}

// A CSV store's [columns] read back exactly: names that need escaping (a tab delimiter, quotes, a
// control character, a dot), class names, and the doubles of the standardization bit for bit.
TEST(Manifest, ColumnsRoundTripExactly) {
  manifest m;
  m.schema = {3, 1, 3, {}, 1000};
  m.record_count = 5;
  m.complete = true;
  row_format f;
  f.header = {"id", "sepal.length", "say \"hi\"", "y", "bell\x07", "city"};
  f.label = "y";
  f.dense = {"sepal.length", "say \"hi\"", "bell\x07"};
  f.sparse = {"city"};
  f.delimiter = '\t';
  f.missing = "skip-row";
  f.buckets_per_field = 1000;
  f.class_names = {"bird", "cat", "dog"};
  f.standardize = {{"sepal.length", 5.843333333333334, 0.8253012917851409},
                   {"bell\x07", 123456789012345680000.0, 0}};
  m.columns = f;
  auto p = manifest::parse(m.to_toml(), "x");
  ASSERT_TRUE(p) << p.err().to_string() << "\n" << m.to_toml();
  ASSERT_TRUE(p->columns);
  EXPECT_EQ(*p->columns, f) << m.to_toml();
  EXPECT_EQ(p->schema, m.schema);
}

// --missing mean: one fill value per dense column, kept bit for bit; another count is refused.
TEST(Manifest, MeanFillValuesRoundTripAndMustCoverEveryDenseColumn) {
  manifest m;
  m.schema.dense_dim = 2;
  m.record_count = 1;
  m.complete = true;
  row_format f;
  f.label = "y";
  f.dense = {"a", "b"};
  f.missing = "mean";
  f.fill = {5.843333333333334, -1e-300};
  m.columns = f;
  auto p = manifest::parse(m.to_toml(), "x");
  ASSERT_TRUE(p) << p.err().to_string() << "\n" << m.to_toml();
  ASSERT_TRUE(p->columns);
  EXPECT_EQ(p->columns->fill, f.fill);
  f.fill.pop_back();
  m.columns = f;
  auto bad = manifest::parse(m.to_toml(), "x");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().to_string().find("one fill value per dense column"), std::string::npos)
      << bad.err().to_string();
}

// A manifest written before [columns] existed opens as before, with no columns.
TEST(Manifest, OldManifestsWithoutColumnsStillParse) {
  auto p = manifest::parse(
      "format_version = 1\nsource = \"csv:a.csv label=y dense=x sparse=\"\nrecord_count = 2\ncomplete = "
      "true\n"
      "[schema]\ndense_dim = 1\nsparse_fields = 0\nnum_classes = 2\nbuckets_per_field = 0\nimage_shape = "
      "[]\n",
      "old");
  ASSERT_TRUE(p) << p.err().to_string();
  EXPECT_FALSE(p->columns);
  auto bad = manifest::parse(
      "format_version = 1\nrecord_count = 2\n[schema]\ndense_dim = 1\nsparse_fields = 0\n[columns]\nlabel = "
      "\"y\"\ndelimiter = \",\"\nhash = \"h\"\nstandardize = [\"x\"]\nmean = [1.0]\n",
      "m");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().to_string().find("one mean and one std per column"), std::string::npos)
      << bad.err().to_string();
}

// A writer given the columns commits them with the manifest; the store opens with them.
TEST(RecordStore, ColumnsAreKeptInTheStore) {
  temp_dir d;
  auto w = record_writer::create(d.str(), small_schema(), "csv:test");
  ASSERT_TRUE(w);
  row_format f;
  f.label = "y";
  f.dense = {"a", "b", "c"};
  f.sparse = {"s", "t"};
  w->set_columns(f);
  ASSERT_TRUE(w->append(make(1)));
  ASSERT_TRUE(w->finish());
  auto s = record_store::open(d.str());
  ASSERT_TRUE(s) << s.err().to_string();
  ASSERT_TRUE(s->info().columns);
  EXPECT_EQ(s->info().columns->dense, f.dense);
  EXPECT_EQ(s->info().columns->buckets_per_field, 0u) << "the schema's";
}

}  // namespace
}  // namespace troupe::storage
