// Between nn's in-memory datasets and storage's record stores: importing a dataset into a store,
// reading a task's record range back as an nn::dataset, and preparing a job's train/test stores
// (imported once per data configuration into a cache directory, reused by later runs).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "troupe/core/error.hpp"
#include "troupe/job/dataset_cache.hpp"
#include "troupe/nn/config.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/storage/record_store.hpp"

namespace troupe::job {

storage::record_schema schema_of(const nn::dataset_info& info);
nn::dataset_info info_of(const storage::manifest& m, const std::string& name);

// Writes every row of `d` into a new store at `dir` (which must not hold one yet).
expected<storage::manifest> write_dataset(const nn::dataset& d, const std::string& dir,
                                          const std::string& source);

// Reads records [first, first + n) of `store` into `out` (buffers reused; out.rows may be less
// than n at the end of the store). Errors name the store and the record.
expected<void> read_records(const storage::record_store& store, std::uint64_t first, std::uint64_t n,
                            nn::dataset& out);
// Sizes `out` for `rows` rows of the store `m` describes (named `name`), buffers reused.
void size_rows(const storage::manifest& m, const std::string& name, std::size_t rows, nn::dataset& out);
// Decodes encoded records first, first + 1, ... laid back to back in `bytes` (as the record server
// sends them) into rows at, at + 1, ... of `out` (sized by size_rows), verifying each checksum.
// Errors (corrupt_record) name `where` and the record, or say the bytes do not fit.
expected<void> decode_rows(const storage::record_schema& s, std::uint64_t first, std::string_view bytes,
                           nn::dataset& out, std::size_t at, const std::string& where);
// Decodes exactly one encoded record (record `index`; bytes of another size are corrupt_record) into
// row `i` of `out` (sized by size_rows for `s`), verifying its checksum.
expected<void> decode_row(const storage::record_schema& s, std::uint64_t index, std::string_view bytes,
                          nn::dataset& out, std::size_t i, const std::string& where);
// Reads the whole store.
expected<nn::dataset> read_all(const storage::record_store& store);

// Reads every record of the store at `dir` (checksums included) in a child process, so a corrupt
// page cannot crash the caller: ok, or an error naming <dir>/data.mdb and the problem. Fork-safe
// callers only (call it before starting threads that hold locks).
expected<void> verify_store(const std::string& dir);
// verify_store, skipped when <dir>/verified records the data file's current size and modification
// time (written after a verification that passed): a write to the file since is verified again.
expected<void> verify_store_once(const std::string& dir);

struct prepared_data {
  std::string train_dir, test_dir;
  std::string key;  // the cache entry's name
  double true_auc = 0;
  bool reused = false;
  // The job's pin on its cache entry (dataset_cache.hpp): `troupe data cache prune` passes over the
  // entry while any copy of this lives. None for named stores.
  std::shared_ptr<cache_pin> pin;
};

// Makes sure `<cache>/<key>/{train,test}` hold the data `c` describes (key derived from c), importing
// them if not. Concurrent preparers of the same key: the first wins, the others wait for it. Both
// stores are verified (verify_store) first: a corrupt cache entry is rebuilt, with a warning
// naming the file. [data] source = "store" names the stores themselves: verified, never rebuilt
// (an error says to re-import them). The entry is pinned (prepared_data::pin) before anything else.
expected<prepared_data> prepare_datasets(const nn::data_config& c, const std::string& cache);

}  // namespace troupe::job
