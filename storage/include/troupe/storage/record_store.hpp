// A dataset: a directory holding an LMDB environment with two databases (docs/storage_format.md):
//   "records": key = record index (u64, MDB_INTEGERKEY), value = encoded record (record.hpp)
//   "meta":    key "manifest" = TOML text (format version, schema, record count, source, complete)
// Records are written in large transactions by record_writer and read by any number of threads
// and processes through record_store.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/storage/lmdb.hpp"
#include "troupe/storage/record.hpp"
#include "troupe/storage/row_format.hpp"

namespace troupe::storage {

inline constexpr std::uint32_t record_format_version = 1;

class page_checker;

struct manifest {
  std::uint32_t format_version = record_format_version;
  record_schema schema;
  std::uint64_t record_count = 0;
  std::string source;     // e.g. "fashion-mnist:train", "criteo:day_0.tsv", "synth-ctr:seed=7"
  bool complete = false;  // false while an import is running or after it died
  // Stores imported from CSV: how their rows were read (`[columns]`; absent in other stores and in
  // manifests written before it existed). Its buckets_per_field is the schema's.
  std::optional<row_format> columns;

  std::string to_toml() const;
  // Errors (bad_manifest, version_mismatch) name `where` and the offending key.
  static expected<manifest> parse(std::string_view text, const std::string& where);
};

class record_store {
 public:
  // Opens a finished dataset. Fails naming the directory when there is no store, the manifest
  // is missing/malformed/of another format version, the import did not finish, or the manifest's
  // record count disagrees with the records present.
  //
  // No read lets LMDB meet a damaged page: the pages a read touches (the main database, the
  // manifest's, and the B-tree path, leaves and overflow pages of the records read) are checked
  // first (page_check.hpp), and damage comes back as corrupt_record naming data.mdb and the page,
  // never as LMDB's assertion (abort) or a stray read (SIGSEGV/SIGBUS).
  static expected<record_store> open(const std::string& dir, env_options opts = {});
  // open() with MDB_RDONLY: nothing in `dir` is written (what commands that only look at a store,
  // `troupe data inspect` and `troupe config check`, use). A missing or empty (0-byte) data.mdb is
  // an error in both, never a store created.
  static expected<record_store> open_read_only(const std::string& dir);

  const std::string& dir() const { return env_->dir(); }
  const manifest& info() const { return manifest_; }
  std::uint64_t count() const { return manifest_.record_count; }

  // Random access. Errors: not_found (index >= count), corrupt_record (naming dir and index).
  expected<record> read(std::uint64_t index) const;

  // Visits records [first, first + n) clipped to count(), in index order, through one cursor in
  // one read transaction; `fn` returns false to stop early. Returns how many were visited. The
  // record reference is reused between calls. Thread-safe (each call has its own transaction).
  using visit_fn = std::function<bool(std::uint64_t index, const record& r)>;
  expected<std::uint64_t> scan(std::uint64_t first, std::uint64_t n, const visit_fn& fn) const;

  // scan() without decoding: the encoded bytes of each record (a view into the map, valid during the
  // call; checksum not verified: the record server hands them to a worker that verifies them).
  // Errors: corrupt_record when a record is missing.
  using raw_visit_fn = std::function<bool(std::uint64_t index, std::string_view bytes)>;
  expected<std::uint64_t> scan_raw(std::uint64_t first, std::uint64_t n, const raw_visit_fn& fn) const;
  // A read transaction kept open, for views that outlive a call: scan_raw(pin, ...) visits in it,
  // and its views stay valid while the pin lives (it also keeps the map open). A dataset is
  // immutable once written, so one pin may be held as long as the store is served (the record
  // server sends records straight from the map). Use a pin on one thread at a time.
  expected<std::shared_ptr<const read_txn>> pin() const;
  expected<std::uint64_t> scan_raw(const read_txn& pin, std::uint64_t first, std::uint64_t n,
                                   const raw_visit_fn& fn) const;

  // Reads [first, first + n) clipped to count() into `out` (resized; buffers reused).
  expected<void> read_batch(std::uint64_t first, std::uint64_t n, std::vector<record>& out) const;

 private:
  record_store() = default;
  // The pages of records [first, last] as of `txn`, checked before LMDB reads them.
  expected<void> check_pages(const read_txn& txn, std::uint64_t first, std::uint64_t last) const;
  std::shared_ptr<lmdb_env> env_;
  std::shared_ptr<const page_checker> pages_;
  dbi records_ = 0;
  manifest manifest_;
};

struct writer_options {
  std::size_t initial_map_size = std::size_t{64} << 20;
  std::size_t txn_bytes = std::size_t{32} << 20;  // encoded bytes per write transaction
  bool no_sync = false;
};

// Appends records to a new dataset. Each full buffer is committed in one transaction together
// with a manifest (complete = false) counting everything committed so far; finish() commits the
// rest and marks the manifest complete. A crash leaves a store that open() refuses (incomplete).
// Not thread-safe (one importer per dataset).
class record_writer {
 public:
  // Fails with already_exists when `dir` already holds an LMDB data file.
  static expected<record_writer> create(const std::string& dir, record_schema schema, std::string source,
                                        writer_options opts = {});

  expected<void> append(const record& r);
  // The class count of the labels appended (ids 0..k-1), for an importer that learns it only from
  // the data: the manifest finish() commits carries it (records do not depend on it, record.hpp).
  void set_num_classes(std::uint32_t k) { manifest_.schema.num_classes = k; }
  // How the rows were read (an importer of CSV text); in every manifest committed from now on.
  void set_columns(row_format f) { manifest_.columns = std::move(f); }
  // Commits what is buffered and the complete manifest; returns it. The writer is done after.
  expected<manifest> finish();
  std::uint64_t count() const { return committed_ + pending_count_; }

 private:
  record_writer() = default;
  expected<void> flush(bool complete);
  std::shared_ptr<lmdb_env> env_;
  dbi records_ = 0, meta_ = 0;
  manifest manifest_;
  std::size_t txn_bytes_ = 0;
  std::string pending_;
  std::uint64_t committed_ = 0, pending_count_ = 0;
  bool finished_ = false;
};

}  // namespace troupe::storage
