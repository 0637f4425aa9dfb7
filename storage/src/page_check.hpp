// Checks the LMDB pages a read is about to touch, before LMDB touches them.
//
// LMDB trusts its pages: a damaged page header fails one of its assertions (the process aborts)
// or sends it outside the map (SIGSEGV, SIGBUS). A dataset is read by workers while anything may
// damage its file (a disk, a user, another program), so a record store must not let a damaged page
// reach LMDB. page_checker maps data.mdb read-only (a second mapping of the same page cache, no
// copy) and walks, as of a read transaction's meta page, the main database and the B-tree pages a
// read will visit: each page's number, flags, bounds, node offsets and sizes, key order, child and
// overflow page numbers. A damaged page comes back as a corrupt_record error naming the file and the
// page; LMDB is called only once the pages passed.
//
// The format is LMDB 0.9's (64-bit pgno_t, 16-byte page header, nodes of 8 + key + data bytes),
// the one liblmdb 0.9.x writes; docs/storage_format.md.
//
// Once the store is open, the checker reads LMDB's own mapping of the file (share_map): a second
// mapping of the same pages would double the page-table entries of every page read (the process's
// Rss counts each page twice, each page faults twice, and its exit unmaps twice as much). It falls
// back to its own mapping when LMDB's cannot be found or LMDB remaps.
//
// The check and LMDB's read are not atomic: a page damaged in between (microseconds) still
// reaches LMDB. What it catches is damage done at any time before a read, which is what a running
// job meets.
#pragma once

#include <lmdb.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "troupe/core/error.hpp"
#include "troupe/storage/lmdb.hpp"

namespace troupe::storage {

class page_checker {
 public:
  // Maps `dir`/data.mdb read-only. Fails (io_error) when it cannot be opened or mapped.
  static expected<std::shared_ptr<page_checker>> open(const std::string& dir);
  // From now on reads the pages through `env`'s mapping of data.mdb, the one holding `inside` (a
  // value `env` returned), as long as `env` does not remap; its own mapping otherwise. Returns
  // false (and changes nothing) when that mapping is not found as data.mdb at offset 0 in
  // /proc/self/maps. Call before the checker is shared between threads.
  bool share_map(const void* inside, std::shared_ptr<const lmdb_env> env);
  ~page_checker();
  page_checker(const page_checker&) = delete;
  page_checker& operator=(const page_checker&) = delete;

  // Checks, as of read transaction `txn`, the main database and every page of database `db`.
  // For small databases (a manifest).
  expected<void> check_all(MDB_txn* txn, std::string_view db) const;
  // Checks, as of `txn`, the main database and the pages of `db` (an MDB_INTEGERKEY database of
  // u64 keys) that a cursor visits for keys [first, last]: the branch pages down to them, their
  // leaves and the overflow pages of their values.
  expected<void> check_keys(MDB_txn* txn, std::string_view db, std::uint64_t first, std::uint64_t last) const;

  const std::string& file() const { return file_; }

 private:
  page_checker() = default;
  struct walk;
  // The mapping a check reads: LMDB's while its generation holds, else the checker's own.
  std::pair<const unsigned char*, std::size_t> mapping() const;
  std::string file_;
  int fd_ = -1;
  const unsigned char* map_ = nullptr;
  std::size_t map_size_ = 0;
  // LMDB's mapping (share_map) and the env's map generation it is valid for.
  const unsigned char* shared_ = nullptr;
  std::size_t shared_size_ = 0;
  std::shared_ptr<const lmdb_env> env_;
  std::uint64_t generation_ = 0;
};

}  // namespace troupe::storage
