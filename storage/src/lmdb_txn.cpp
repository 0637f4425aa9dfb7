#include "troupe/storage/lmdb.hpp"

namespace troupe::storage {

namespace {
MDB_val to_val(std::string_view s) {
  return {s.size(), const_cast<char*>(s.data())};
}
std::string_view from_val(const MDB_val& v) {
  return {static_cast<const char*>(v.mv_data), v.mv_size};
}

expected<std::optional<std::string_view>> get_in(MDB_txn* txn, dbi db, std::string_view key,
                                                 const std::string& dir) {
  MDB_val k = to_val(key), v{0, nullptr};
  int rc = mdb_get(txn, db, &k, &v);
  if (rc == MDB_NOTFOUND) return std::optional<std::string_view>();
  if (rc != 0) return lmdb_error(rc, dir + ": get");
  return std::optional<std::string_view>(from_val(v));
}

expected<std::uint64_t> entries_in(MDB_txn* txn, dbi db, const std::string& dir) {
  MDB_stat st;
  if (int rc = mdb_stat(txn, db, &st); rc != 0) return lmdb_error(rc, dir + ": stat");
  return static_cast<std::uint64_t>(st.ms_entries);
}
}  // namespace

read_txn::read_txn(read_txn&& o) noexcept : env_(std::move(o.env_)), txn_(o.txn_) {
  o.txn_ = nullptr;
}

read_txn& read_txn::operator=(read_txn&& o) noexcept {
  if (this != &o) {
    release();
    env_ = std::move(o.env_);
    txn_ = o.txn_;
    o.txn_ = nullptr;
  }
  return *this;
}

read_txn::~read_txn() {
  release();
}

void read_txn::release() noexcept {
  if (!txn_) return;
  mdb_txn_abort(txn_);
  txn_ = nullptr;
  env_->reader_exit();
}

expected<std::optional<std::string_view>> read_txn::get(dbi db, std::string_view key) const {
  return get_in(txn_, db, key, env_->dir());
}

expected<std::uint64_t> read_txn::entries(dbi db) const {
  return entries_in(txn_, db, env_->dir());
}

error write_txn::fail(int rc, const std::string& what) const {
  if (rc == MDB_MAP_FULL) map_full_ = true;
  return lmdb_error(rc, env_.dir() + ": " + what);
}

expected<std::optional<std::string_view>> write_txn::get(dbi db, std::string_view key) const {
  return get_in(txn_, db, key, env_.dir());
}

expected<void> write_txn::put(dbi db, std::string_view key, std::string_view value, unsigned flags) {
  MDB_val k = to_val(key), v = to_val(value);
  if (int rc = mdb_put(txn_, db, &k, &v, flags); rc != 0) return fail(rc, "put");
  return {};
}

expected<char*> write_txn::reserve(dbi db, std::string_view key, std::size_t size, unsigned flags) {
  MDB_val k = to_val(key), v{size, nullptr};
  if (int rc = mdb_put(txn_, db, &k, &v, flags | MDB_RESERVE); rc != 0) return fail(rc, "reserve");
  return static_cast<char*>(v.mv_data);
}

expected<bool> write_txn::del(dbi db, std::string_view key) {
  MDB_val k = to_val(key);
  int rc = mdb_del(txn_, db, &k, nullptr);
  if (rc == MDB_NOTFOUND) return false;
  if (rc != 0) return fail(rc, "del");
  return true;
}

expected<std::uint64_t> write_txn::entries(dbi db) const {
  return entries_in(txn_, db, env_.dir());
}

expected<void> write_txn::clear(dbi db) {
  if (int rc = mdb_drop(txn_, db, 0); rc != 0) return fail(rc, "clear");
  return {};
}

expected<dbi> write_txn::open_db(const std::string& name, unsigned flags) {
  dbi h = 0;
  if (int rc = mdb_dbi_open(txn_, name.c_str(), flags, &h); rc != 0)
    return fail(rc, "open database '" + name + "'");
  return h;
}

expected<cursor> cursor::open(MDB_txn* txn, dbi db, const std::string& what) {
  MDB_cursor* c = nullptr;
  if (int rc = mdb_cursor_open(txn, db, &c); rc != 0) return lmdb_error(rc, what + ": open cursor");
  return cursor(c);
}

cursor::~cursor() {
  if (cur_) mdb_cursor_close(cur_);
}

expected<bool> cursor::move(MDB_cursor_op op) {
  int rc = mdb_cursor_get(cur_, &k_, &v_, op);
  if (rc == MDB_NOTFOUND) return false;
  if (rc != 0) return lmdb_error(rc, "cursor");
  return true;
}

expected<bool> cursor::seek(std::string_view key) {
  k_ = to_val(key);
  return move(MDB_SET_RANGE);
}

expected<void> cursor::del() {
  if (int rc = mdb_cursor_del(cur_, 0); rc != 0) return lmdb_error(rc, "cursor del");
  return {};
}

}  // namespace troupe::storage
