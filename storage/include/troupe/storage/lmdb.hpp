// A thin RAII layer over LMDB. The rules it enforces (see docs/storage_format.md):
// - one lmdb_env per directory per process (open() hands out the already-open one);
// - MDB_NOTLS: a read_txn may move between threads (one thread at a time uses it);
// - every write transaction begins and commits on the environment's single writer thread:
//   callers hand a function to submit()/write() and get its result back;
// - MDB_MAP_FULL aborts the transaction, the writer grows the map and runs the function again;
// - stale reader slots of dead processes are cleared at open (mdb_reader_check).
// LMDB errors never escape as exceptions or crashes; they come back as storage_errc values whose
// context names the directory.
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "troupe/core/error.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::storage {

using dbi = MDB_dbi;

struct env_options {
  std::size_t initial_map_size = std::size_t{64} << 20;  // grown by doubling on MDB_MAP_FULL
  std::size_t max_map_size = std::size_t{1} << 40;
  unsigned max_dbs = 16;
  bool read_only = false;
  // Skips the fsync at commit: a killed process still loses nothing committed, an OS crash may
  // lose the last transactions. Only for scratch data (benchmarks, tests).
  bool no_sync = false;
  // Transactions the writer may fold into one commit (each in its own nested transaction, so a
  // failing function rolls back only its own changes). 1 disables group commit.
  unsigned max_batch = 64;
};

class lmdb_env;
class write_txn;

// A write: runs on the writer thread inside a transaction. It may run more than once (after the
// map grows), so it must act only through the transaction. An error rolls back its changes. It
// must not own (capture a shared_ptr to) its environment: the writer cannot join itself.
using write_fn = std::function<expected<void>(write_txn&)>;

// Turns an LMDB return code into a storage error naming `what` (e.g. "DIR: put record 7").
error lmdb_error(int rc, const std::string& what);

// Value views point into the map and are valid until the transaction that produced them ends.
class read_txn {
 public:
  read_txn(read_txn&& o) noexcept;
  read_txn& operator=(read_txn&& o) noexcept;
  read_txn(const read_txn&) = delete;
  read_txn& operator=(const read_txn&) = delete;
  ~read_txn();

  // nullopt when the key is absent.
  expected<std::optional<std::string_view>> get(dbi db, std::string_view key) const;
  expected<std::uint64_t> entries(dbi db) const;
  MDB_txn* raw() const { return txn_; }
  const lmdb_env& env() const { return *env_; }

 private:
  friend class lmdb_env;
  read_txn(std::shared_ptr<lmdb_env> env, MDB_txn* txn) : env_(std::move(env)), txn_(txn) {}
  void release() noexcept;
  std::shared_ptr<lmdb_env> env_;
  MDB_txn* txn_ = nullptr;
};

// Only ever constructed by the writer thread; handed by reference to a write_fn.
class write_txn {
 public:
  write_txn(const write_txn&) = delete;
  write_txn& operator=(const write_txn&) = delete;

  expected<std::optional<std::string_view>> get(dbi db, std::string_view key) const;
  expected<void> put(dbi db, std::string_view key, std::string_view value, unsigned flags = 0);
  // Reserves `size` bytes for the value (MDB_RESERVE) and returns where to write them.
  expected<char*> reserve(dbi db, std::string_view key, std::size_t size, unsigned flags = 0);
  // false when the key was absent.
  expected<bool> del(dbi db, std::string_view key);
  expected<std::uint64_t> entries(dbi db) const;
  expected<void> clear(dbi db);
  // Opens (creating if needed) a named database; the handle is usable after this write commits.
  expected<dbi> open_db(const std::string& name, unsigned flags);

  MDB_txn* raw() const { return txn_; }
  const lmdb_env& env() const { return env_; }
  // Set when any operation hit MDB_MAP_FULL: the writer grows the map and retries.
  bool hit_map_full() const { return map_full_; }

 private:
  friend class lmdb_writer;
  write_txn(const lmdb_env& env, MDB_txn* txn) : env_(env), txn_(txn) {}
  error fail(int rc, const std::string& what) const;
  const lmdb_env& env_;
  MDB_txn* txn_;
  mutable bool map_full_ = false;
};

// A cursor over one database inside a read or write transaction (which must outlive it).
class cursor {
 public:
  static expected<cursor> open(MDB_txn* txn, dbi db, const std::string& what);
  cursor(cursor&& o) noexcept : cur_(o.cur_) { o.cur_ = nullptr; }
  cursor& operator=(cursor&&) = delete;
  cursor(const cursor&) = delete;
  ~cursor();

  // Each positions the cursor and returns false when there is no such entry.
  expected<bool> first() { return move(MDB_FIRST); }
  expected<bool> last() { return move(MDB_LAST); }
  expected<bool> next() { return move(MDB_NEXT); }
  expected<bool> prev() { return move(MDB_PREV); }
  // First key >= `key`.
  expected<bool> seek(std::string_view key);
  // Deletes the current entry (write transactions only); next() then moves to the entry that
  // followed it (LMDB's C_DEL cursor state). key()/value() are stale until the next move.
  expected<void> del();

  std::string_view key() const { return {static_cast<const char*>(k_.mv_data), k_.mv_size}; }
  std::string_view value() const { return {static_cast<const char*>(v_.mv_data), v_.mv_size}; }

 private:
  explicit cursor(MDB_cursor* c) : cur_(c) {}
  expected<bool> move(MDB_cursor_op op);
  MDB_cursor* cur_;
  MDB_val k_{0, nullptr}, v_{0, nullptr};
};

class lmdb_writer;

class lmdb_env : public std::enable_shared_from_this<lmdb_env> {
 public:
  // Opens (creating the directory unless read_only) or returns this process's open environment
  // of `dir`. Fails with a clear error on a directory that is not an LMDB environment, a
  // truncated data file, or an open with incompatible options (read-only vs read-write).
  static expected<std::shared_ptr<lmdb_env>> open(const std::string& dir, env_options opts = {});
  ~lmdb_env();
  lmdb_env(const lmdb_env&) = delete;
  lmdb_env& operator=(const lmdb_env&) = delete;

  const std::string& dir() const { return dir_; }
  const env_options& options() const { return opts_; }
  std::size_t map_size() const;

  // Opens a named database; with MDB_CREATE in `flags` creates it (through the writer), without
  // fails with not_found when it is absent. Cached: later calls return the same handle. Thread-safe.
  expected<dbi> open_db(const std::string& name, unsigned flags = 0);

  // Thread-safe. Must not be held by a thread that then waits on a write (the map cannot grow
  // while read transactions are open; the writer gives up after a timeout with map_full).
  expected<read_txn> begin_read();

  // Queues `fn` for the writer thread; the future resolves after its transaction committed (or
  // with the function's error, the commit error, or writer_stopped). Thread-safe.
  std::future<expected<void>> submit(write_fn fn);
  // submit(fn).get(). Fails (instead of deadlocking) when called on the writer thread itself.
  expected<void> write(write_fn fn);

  MDB_env* raw() const { return env_; }
  // Changes when the map is remapped (grown, or another process's size adopted): pointers into
  // the old map are then dangling. Stable while any read transaction is open (a remap waits for
  // every reader to leave).
  std::uint64_t map_generation() const;

  // The map-resize gate (used by read_txn and the writer; not for callers).
  void reader_enter() const;
  void reader_exit() const;

 private:
  friend class lmdb_writer;
  lmdb_env(std::string dir, env_options opts);
  expected<void> init();
  expected<void> check_truncation() const;
  // Grows (new_size > 0) or adopts another process's size (new_size == 0) with no reader open.
  expected<void> resize(std::size_t new_size);
  expected<MDB_txn*> begin_raw_read();

  struct gate;
  std::string dir_;
  env_options opts_;
  MDB_env* env_ = nullptr;
  std::unique_ptr<gate> gate_;
  std::unique_ptr<lmdb_writer> writer_;
  struct dbi_cache;
  std::unique_ptr<dbi_cache> dbis_;
};

// Fixed-width keys that sort in numeric order under LMDB's default byte comparison.
std::string be64_key(std::uint64_t v);
std::uint64_t from_be64(std::string_view s);

}  // namespace troupe::storage
