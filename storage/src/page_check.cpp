#include "page_check.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "troupe/storage/errc.hpp"

namespace troupe::storage {

namespace {

// LMDB 0.9's on-disk layout (mdb.c: MDB_page, MDB_node, MDB_meta, MDB_db).
constexpr std::size_t page_header = 16;  // pgno u64, pad u16, flags u16, lower u16, upper u16
constexpr std::size_t node_header = 8;   // lo u16, hi u16, flags u16, ksize u16
constexpr std::size_t db_record_size = 48;
constexpr std::uint16_t p_branch = 0x01, p_leaf = 0x02, p_overflow = 0x04, p_meta = 0x08;
constexpr std::uint16_t p_kinds = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40;  // + LEAF2, SUBP
constexpr std::uint16_t f_bigdata = 0x01, f_subdata = 0x02;
constexpr std::uint32_t meta_magic = 0xBEEFC0DE, meta_version = 1;
constexpr std::uint64_t no_root = ~std::uint64_t{0};
constexpr unsigned max_depth = 32;

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// MDB_db: pad u32, flags u16, depth u16, branch/leaf/overflow pages, entries, root (u64 each).
struct db_record {
  std::uint16_t depth = 0;
  std::uint64_t root = no_root;
};

db_record read_db(const unsigned char* p) {
  return {load<std::uint16_t>(p + 6), load<std::uint64_t>(p + 40)};
}

std::string kind_name(std::uint16_t kind) {
  return kind == p_branch ? "branch" : kind == p_leaf ? "leaf" : "overflow";
}

}  // namespace

// One check as of one meta page: its page size and last page, and the file's name for errors.
struct page_checker::walk {
  const page_checker& pc;
  std::size_t psize = 0;
  std::uint64_t last_pg = 0;
  // Read under a read transaction: a remap waits for every reader, so the mapping holds throughout.
  std::pair<const unsigned char*, std::size_t> map = pc.mapping();

  error bad(std::uint64_t pgno, const std::string& what) const {
    return error(storage_errc::corrupt_record, pc.file_ + ": page " + std::to_string(pgno) + ": " + what +
                                                   " (the store is damaged; import it again)");
  }
  const unsigned char* page(std::uint64_t pgno) const { return map.first + pgno * psize; }
  std::string range_text() const { return "pages 2.." + std::to_string(last_pg) + " in use"; }

  // Header of a branch or leaf page and its node offsets; returns the number of nodes.
  expected<unsigned> check_page(std::uint64_t pgno, std::uint16_t kind) const {
    if (pgno < 2 || pgno > last_pg)
      return bad(pgno, "a " + kind_name(kind) + " page out of range (" + range_text() + ")");
    const unsigned char* p = page(pgno);
    if (auto named = load<std::uint64_t>(p); named != pgno)
      return bad(pgno, "its header names page " + std::to_string(named));
    if (auto flags = load<std::uint16_t>(p + 10) & p_kinds; flags != kind)
      return bad(pgno, "flags " + std::to_string(flags) + " where a " + kind_name(kind) + " page belongs");
    const unsigned lower = load<std::uint16_t>(p + 12), upper = load<std::uint16_t>(p + 14);
    if (lower < page_header || (lower - page_header) % 2 != 0 || lower > upper || upper > psize)
      return bad(pgno,
                 "free space " + std::to_string(lower) + ".." + std::to_string(upper) + " out of bounds");
    const unsigned n = static_cast<unsigned>((lower - page_header) / 2);
    if (n < (kind == p_branch ? 2u : 1u))
      return bad(pgno, std::to_string(n) + " nodes on a " + kind_name(kind) + " page");
    for (unsigned i = 0; i < n; ++i) {
      const std::size_t off = load<std::uint16_t>(p + page_header + 2 * i);
      if (off < upper || off + node_header > psize ||
          off + node_header + load<std::uint16_t>(p + off + 6) > psize)
        return bad(pgno, "node " + std::to_string(i) + " at " + std::to_string(off) + " out of bounds");
    }
    return n;
  }

  static const unsigned char* node(const unsigned char* p, unsigned i) {
    return p + load<std::uint16_t>(p + page_header + 2 * i);
  }
  static std::size_t key_size(const unsigned char* n) { return load<std::uint16_t>(n + 6); }
  static std::uint16_t node_flags(const unsigned char* n) { return load<std::uint16_t>(n + 4); }
  static std::uint64_t data_size(const unsigned char* n) {
    return load<std::uint16_t>(n) | std::uint64_t{load<std::uint16_t>(n + 2)} << 16;
  }
  static std::uint64_t child(const unsigned char* n) {
    return data_size(n) | std::uint64_t{node_flags(n)} << 32;
  }

  // A leaf node's value: inside the page, or (F_BIGDATA) on overflow pages that exist and say so.
  expected<void> check_value(std::uint64_t pgno, unsigned i, const unsigned char* n) const {
    const std::size_t end = static_cast<std::size_t>(n - page(pgno)) + node_header + key_size(n);
    const std::uint64_t size = data_size(n);
    if (!(node_flags(n) & f_bigdata)) {
      if (end + size > psize) return bad(pgno, "value of node " + std::to_string(i) + " out of bounds");
      return {};
    }
    if (end + 8 > psize)
      return bad(pgno, "overflow reference of node " + std::to_string(i) + " out of bounds");
    const auto ov = load<std::uint64_t>(n + node_header + key_size(n));
    const std::uint64_t need = (page_header - 1 + size) / psize + 1;
    if (ov < 2 || ov > last_pg || need > last_pg - ov + 1)
      return bad(pgno, "node " + std::to_string(i) + ": overflow pages " + std::to_string(ov) + "+" +
                           std::to_string(need) + " out of range (" + range_text() + ")");
    const unsigned char* o = page(ov);
    if (load<std::uint64_t>(o) != ov || (load<std::uint16_t>(o + 10) & p_kinds) != p_overflow ||
        load<std::uint32_t>(o + 12) < need)
      return bad(ov, "not the overflow page of " + std::to_string(need) + " pages that page " +
                         std::to_string(pgno) + " refers to");
    return {};
  }

  // The meta page `txn` reads (LMDB picks page txnid & 1) and its main database.
  expected<db_record> meta(MDB_txn* txn) {
    MDB_stat st;
    if (int rc = mdb_env_stat(mdb_txn_env(txn), &st); rc != 0)
      return error(storage_errc::lmdb_error, pc.file_ + ": stat: " + mdb_strerror(rc));
    psize = st.ms_psize;
    const std::uint64_t txnid = mdb_txn_id(txn), which = txnid & 1;
    if (psize < 512 || map.second < 2 * psize) return bad(which, "no room for the meta pages");
    const unsigned char* p = page(which);
    const unsigned char* m = p + page_header;
    if ((load<std::uint16_t>(p + 10) & p_kinds) != p_meta || load<std::uint32_t>(m) != meta_magic ||
        load<std::uint32_t>(m + 4) != meta_version || load<std::uint64_t>(m + 128) != txnid)
      return bad(which, "not the meta page of transaction " + std::to_string(txnid));
    last_pg = load<std::uint64_t>(m + 120);
    struct stat fst {};
    if (::fstat(pc.fd_, &fst) != 0)
      return error(storage_errc::io_error, pc.file_ + ": stat: " + std::strerror(errno));
    const auto file_pages =
        std::min<std::uint64_t>(static_cast<std::uint64_t>(fst.st_size), map.second) / psize;
    if (last_pg < 2 || last_pg >= file_pages)
      return bad(which, "last page " + std::to_string(last_pg) + ", the file holds " +
                            std::to_string(file_pages) + " (truncated?)");
    return read_db(m + 24 + db_record_size);  // mm_dbs[MAIN_DBI]
  }

  // Keys [first, last] of an integer-key database, or (all) every page of any database. Every
  // page visited has its keys inside [lo, hi) of its parent's node (integer keys).
  struct range {
    bool all = true;
    std::uint64_t first = 0, last = 0;
  };

  // Node `i`'s key on page `pgno`, at `p`, as an integer key (8 bytes).
  expected<std::uint64_t> int_key(std::uint64_t pgno, const unsigned char* p, unsigned i) const {
    const unsigned char* nd = node(p, i);
    if (key_size(nd) != 8)
      return bad(pgno,
                 "node " + std::to_string(i) + ": key of " + std::to_string(key_size(nd)) + " bytes, not 8");
    return load<std::uint64_t>(nd + node_header);
  }

  // A leaf node's value checked; with `find`, the record of the subdatabase `name` when this node
  // is it.
  expected<void> check_leaf_node(std::uint64_t pgno, unsigned i, const unsigned char* nd,
                                 std::optional<db_record>* find, std::string_view name) const {
    if (auto v = check_value(pgno, i, nd); !v) return v;
    if (!find || !(node_flags(nd) & f_subdata) ||
        std::string_view(reinterpret_cast<const char*>(nd + node_header), key_size(nd)) != name)
      return {};
    if (data_size(nd) != db_record_size)
      return bad(pgno, "database '" + std::string(name) + "': a record of " + std::to_string(data_size(nd)) +
                           " bytes");
    *find = read_db(nd + node_header + key_size(nd));
    return {};
  }

  expected<void> descend(std::uint64_t pgno, unsigned level, const db_record& db, const range& r,
                         std::uint64_t lo, std::optional<std::uint64_t> hi,
                         std::optional<db_record>* find = nullptr, std::string_view name = {}) const {
    const bool leaf = level == db.depth;
    auto n = check_page(pgno, leaf ? p_leaf : p_branch);
    if (!n) return n.err();
    const unsigned char* p = page(pgno);
    std::optional<std::uint64_t> prev;
    for (unsigned i = 0; i < *n; ++i) {
      const unsigned char* nd = node(p, i);
      std::uint64_t key = lo;
      if (!r.all && (leaf || i > 0)) {
        auto k = int_key(pgno, p, i);
        if (!k) return k.err();
        key = *k;
        if ((prev && key <= *prev) || key < lo || (hi && key >= *hi))
          return bad(pgno, "node " + std::to_string(i) + ": key " + std::to_string(key) + " out of order");
        prev = key;
      }
      if (leaf) {
        if (!r.all && (key < r.first || key > r.last)) continue;
        if (auto v = check_leaf_node(pgno, i, nd, find, name); !v) return v;
        continue;
      }
      std::optional<std::uint64_t> child_hi = hi;
      if (!r.all && i + 1 < *n) {
        auto k = int_key(pgno, p, i + 1);
        if (!k) return k.err();
        child_hi = *k;
      }
      if (!r.all && (key > r.last || (child_hi && *child_hi <= r.first))) continue;
      if (auto c = descend(child(nd), level + 1, db, r, key, child_hi, find, name); !c) return c;
    }
    return {};
  }

  expected<void> tree(const db_record& db, const range& r, std::uint64_t meta_pg,
                      std::optional<db_record>* find = nullptr, std::string_view name = {}) const {
    if (db.root == no_root) return {};
    if (db.depth < 1 || db.depth > max_depth)
      return bad(meta_pg, "a database of depth " + std::to_string(db.depth));
    return descend(db.root, 1, db, r, 0, std::nullopt, find, name);
  }

  // The main database checked whole, then `name`'s record in it.
  expected<db_record> named(MDB_txn* txn, std::string_view name) {
    auto main = meta(txn);
    if (!main) return main.err();
    std::optional<db_record> found;
    if (auto t = tree(*main, range{}, mdb_txn_id(txn) & 1, &found, name); !t) return t.err();
    if (!found) return error(storage_errc::not_found, pc.file_ + ": no database '" + std::string(name) + "'");
    return *found;
  }
};

expected<std::shared_ptr<page_checker>> page_checker::open(const std::string& dir) {
  std::shared_ptr<page_checker> pc(new page_checker());
  pc->file_ = dir + "/data.mdb";
  pc->fd_ = ::open(pc->file_.c_str(), O_RDONLY | O_CLOEXEC);
  if (pc->fd_ < 0) return error(storage_errc::io_error, pc->file_ + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(pc->fd_, &st) != 0 || st.st_size <= 0)
    return error(storage_errc::io_error, pc->file_ + ": empty or unreadable");
  pc->map_size_ = static_cast<std::size_t>(st.st_size);
  void* m = ::mmap(nullptr, pc->map_size_, PROT_READ, MAP_SHARED, pc->fd_, 0);
  if (m == MAP_FAILED) {
    pc->map_size_ = 0;
    return error(storage_errc::io_error, pc->file_ + ": mmap: " + std::strerror(errno));
  }
  pc->map_ = static_cast<const unsigned char*>(m);
  return pc;
}

bool page_checker::share_map(const void* inside, std::shared_ptr<const lmdb_env> env) {
  // /proc/self/maps lines: "start-end perms offset dev inode path".
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<std::uintptr_t>(inside);
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::uintptr_t start = 0, end = 0;
    char dash = 0;
    std::string perms, offset, dev, inode, path;
    if (!(in >> std::hex >> start >> dash >> end >> perms >> offset >> dev >> inode)) continue;
    if (at < start || at >= end) continue;
    std::getline(in >> std::ws, path);
    std::error_code ec;
    if (std::stoull(offset, nullptr, 16) != 0 || path.empty() ||
        !std::filesystem::equivalent(path, file_, ec))
      return false;
    generation_ = env->map_generation();
    env_ = std::move(env);
    shared_ = reinterpret_cast<const unsigned char*>(start);
    shared_size_ = end - start;
    return true;
  }
  return false;
}

std::pair<const unsigned char*, std::size_t> page_checker::mapping() const {
  if (shared_ && env_->map_generation() == generation_) return {shared_, shared_size_};
  return {map_, map_size_};
}

page_checker::~page_checker() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_size_);
  if (fd_ >= 0) ::close(fd_);
}

expected<void> page_checker::check_all(MDB_txn* txn, std::string_view db) const {
  walk w{*this};
  auto d = w.named(txn, db);
  if (!d) return d.err();
  return w.tree(*d, walk::range{}, mdb_txn_id(txn) & 1);
}

expected<void> page_checker::check_keys(MDB_txn* txn, std::string_view db, std::uint64_t first,
                                        std::uint64_t last) const {
  walk w{*this};
  auto d = w.named(txn, db);
  if (!d) return d.err();
  return w.tree(*d, walk::range{false, first, last}, mdb_txn_id(txn) & 1);
}

}  // namespace troupe::storage
