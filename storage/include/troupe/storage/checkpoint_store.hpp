// Checkpoints of a parameter-server shard: dense tensors, embedding rows and optimizer slots, by
// version, in a directory of their own: headers and the latest pointer in an LMDB environment,
// each version's data in a file beside it (docs/storage_format.md, "checkpoint store").
//
// A full checkpoint holds the whole state; an incremental one holds the dense tensors and rows
// that changed since its parent (the latest checkpoint when it was written). load(v) applies the
// chain full -> incremental -> ... -> v. A version's data file is written, fsynced and renamed
// into place before its header and the "latest" pointer are committed (one LMDB transaction), so
// latest always names a complete checkpoint and a crash loses at most the checkpoint being
// written. Versions written by older builds (data in LMDB, format 1) still load.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "troupe/storage/lmdb.hpp"

namespace troupe::storage {

using dense_tensors = std::map<std::string, std::vector<float>>;
using embedding_table = std::unordered_map<std::uint64_t, std::vector<float>>;  // id -> row
using embedding_tables = std::map<std::string, embedding_table>;

struct shard_state {
  dense_tensors dense;
  embedding_tables embeddings;
  // Optimizer slots keyed like the parameters they belong to, e.g. "adam.m/fc1.w".
  dense_tensors dense_slots;
  embedding_tables embedding_slots;
  bool operator==(const shard_state&) const = default;
};

// Rows of one table laid out flat: ids[i] owns values[i*width, (i+1)*width). Ids are unique.
struct flat_rows {
  std::string name;
  std::size_t width = 0;
  std::vector<std::uint64_t> ids;
  std::vector<float> values;
};

// A shard's state as a PS shard snapshots it: what write() persists without gathering rows one by
// one. A table name may appear more than once (rows of different widths); loads as shard_state.
struct flat_state {
  std::vector<std::pair<std::string, std::vector<float>>> dense, dense_slots;
  std::vector<flat_rows> embeddings, embedding_slots;
};

enum class checkpoint_kind : std::uint8_t { full = 0, incremental = 1 };

struct checkpoint_info {
  std::uint64_t version = 0;
  std::uint64_t parent = 0;  // incremental: the version it applies on; full: 0
  checkpoint_kind kind = checkpoint_kind::full;
  bool complete = false;
  std::uint64_t entries = 0;  // format 1: LMDB values (tensors, row packs); 2: blocks of the data file
  std::uint64_t bytes = 0;    // payload bytes (floats)
  std::uint8_t format = 2;    // 1: data in the ckpt_data database (older builds); 2: in a data file
};

struct checkpoint_options {
  env_options env;
  // After each write, keep this many full checkpoints (with their incrementals); 0: never collect.
  std::uint32_t keep_full = 2;
};

// One writer at a time per store (a PS shard owns its directory). Reads are thread-safe.
class checkpoint_store {
 public:
  // Opens or creates; removes what an interrupted write or collection left behind.
  static expected<checkpoint_store> open(const std::string& dir, checkpoint_options opts = {});

  const std::string& dir() const { return env_->dir(); }

  // Writes `s` as a new version and makes it latest; returns the version. An incremental needs a
  // latest checkpoint to apply on (not_found otherwise). On error nothing becomes latest (a disk
  // fault is disk_full / disk_io naming the file). May run on any thread, one write at a time.
  expected<std::uint64_t> write(const flat_state& s, checkpoint_kind kind);
  // The same from maps (the rows are gathered into a flat_state first).
  expected<std::uint64_t> write(const shard_state& s, checkpoint_kind kind);

  // The latest complete version; nullopt when there is none.
  expected<std::optional<std::uint64_t>> latest() const;
  // The full state at `version` (not_found when absent or incomplete; corrupt_checkpoint when a
  // value fails its checksum or the chain is broken).
  expected<shard_state> load(std::uint64_t version) const;
  expected<shard_state> load_latest() const;
  expected<std::vector<checkpoint_info>> list() const;

  // Removes versions older than the keep_full-th newest full checkpoint, incomplete ones and data
  // files no complete version owns. Returns how many versions were removed.
  expected<std::uint64_t> collect(std::uint32_t keep_full);

 private:
  checkpoint_store() = default;
  expected<void> remove_version(std::uint64_t version);
  expected<void> remove_stray_files();

  std::shared_ptr<lmdb_env> env_;
  dbi versions_ = 0, data_ = 0, meta_ = 0;
  checkpoint_options opts_;
};

}  // namespace troupe::storage
