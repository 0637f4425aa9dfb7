#include "troupe/storage/record_store.hpp"

#include <cstring>
#include <filesystem>
#include <optional>

#include "page_check.hpp"

namespace troupe::storage {

namespace fs = std::filesystem;

namespace {
constexpr char manifest_key[] = "manifest";

std::string_view as_view(const std::uint64_t& i) {
  return {reinterpret_cast<const char*>(&i), sizeof(i)};
}
}  // namespace

namespace {

// <dir>/data.mdb is there and not empty (LMDB would make a new environment of an empty file: the
// user's file, grown to two meta pages).
expected<void> check_data_file(const std::string& dir) {
  const auto data = fs::path(dir) / "data.mdb";
  if (!fs::exists(data))
    return make_unexpected(storage_errc::not_found, dir + ": not a record store (no data.mdb)");
  std::error_code ec;
  if (fs::file_size(data, ec) == 0 && !ec)
    return make_unexpected(storage_errc::bad_manifest,
                           data.string() + ": empty (0 bytes): not a record store");
  return {};
}

// The main database (read by open_db) and the meta database's pages, checked before LMDB reads them.
expected<void> check_meta_pages(lmdb_env& env, const page_checker& pages, const std::string& dir) {
  auto txn = env.begin_read();
  if (!txn) return txn.err();
  auto c = pages.check_all(txn->raw(), "meta");
  if (c) return {};
  if (!(c.err() == storage_errc::not_found)) return c.err();
  return make_unexpected(storage_errc::bad_manifest, dir + ": not a record store (no meta database)");
}

// A complete import's manifest, which counts the records the store holds (`records` as of `txn`).
expected<manifest> complete_manifest(std::string_view text, const std::string& dir, const read_txn& txn,
                                     dbi records) {
  auto m = manifest::parse(text, dir + "/manifest");
  if (!m) return m.err();
  if (!m->complete)
    return make_unexpected(storage_errc::bad_manifest,
                           dir + ": import did not finish (manifest complete = false); import again");
  auto n = txn.entries(records);
  if (!n) return n.err();
  if (*n != m->record_count)
    return make_unexpected(storage_errc::bad_manifest, dir + ": manifest says " +
                                                           std::to_string(m->record_count) +
                                                           " records, the store holds " + std::to_string(*n));
  return m;
}

}  // namespace

expected<record_store> record_store::open(const std::string& dir, env_options opts) {
  if (auto d = check_data_file(dir); !d) return d.err();
  auto env = lmdb_env::open(dir, opts);
  if (!env) return env.err();
  record_store s;
  s.env_ = std::move(*env);
  auto pages = page_checker::open(dir);
  if (!pages) return pages.err();
  s.pages_ = *pages;
  if (auto c = check_meta_pages(*s.env_, **pages, dir); !c) return c.err();
  auto meta = s.env_->open_db("meta");
  auto records = s.env_->open_db("records", MDB_INTEGERKEY);
  if (!meta || !records)
    return make_unexpected(storage_errc::bad_manifest,
                           dir + ": not a record store (no meta/records database)");
  s.records_ = *records;
  auto txn = s.env_->begin_read();
  if (!txn) return txn.err();
  auto text = txn->get(*meta, manifest_key);
  if (!text) return text.err();
  if (!*text) return make_unexpected(storage_errc::bad_manifest, dir + ": no manifest");
  // The manifest's bytes lie in LMDB's map: the checker reads that mapping from now on.
  (*pages)->share_map((*text)->data(), s.env_);
  auto m = complete_manifest(**text, dir, *txn, s.records_);
  if (!m) return m.err();
  s.manifest_ = std::move(*m);
  return s;
}

expected<record_store> record_store::open_read_only(const std::string& dir) {
  env_options o;
  o.read_only = true;
  return open(dir, o);
}

expected<record> record_store::read(std::uint64_t index) const {
  if (index >= count())
    return make_unexpected(storage_errc::not_found, dir() + ": record " + std::to_string(index) +
                                                        " (store has " + std::to_string(count()) + ")");
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  if (auto c = check_pages(*txn, index, index); !c) return c.err();
  auto v = txn->get(records_, as_view(index));
  if (!v) return v.err();
  if (!*v)
    return make_unexpected(storage_errc::corrupt_record,
                           dir() + ": record " + std::to_string(index) + " missing");
  record r;
  if (auto d = decode_record(manifest_.schema, index, **v, r, dir()); !d) return d.err();
  return r;
}

expected<std::uint64_t> record_store::scan_raw(std::uint64_t first, std::uint64_t n,
                                               const raw_visit_fn& fn) const {
  if (first >= count()) return std::uint64_t{0};
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  return scan_raw(*txn, first, n, fn);
}

expected<std::shared_ptr<const read_txn>> record_store::pin() const {
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  return std::make_shared<const read_txn>(std::move(*txn));
}

expected<std::uint64_t> record_store::scan_raw(const read_txn& txn, std::uint64_t first, std::uint64_t n,
                                               const raw_visit_fn& fn) const {
  if (first >= count()) return std::uint64_t{0};
  const std::uint64_t end = first + std::min(n, count() - first);
  // The cursor moves one past the last record visited (to `end`).
  if (auto c = check_pages(txn, first, end); !c) return c.err();
  auto cur = cursor::open(txn.raw(), records_, dir());
  if (!cur) return cur.err();
  std::uint64_t i = first;
  for (auto ok = cur->seek(as_view(first)); i < end; ok = cur->next(), ++i) {
    if (!ok) return ok.err();
    std::uint64_t key = 0;
    if (*ok && cur->key().size() == sizeof(key)) std::memcpy(&key, cur->key().data(), sizeof(key));
    if (!*ok || key != i)
      return make_unexpected(storage_errc::corrupt_record,
                             dir() + ": record " + std::to_string(i) + " missing");
    if (!fn(i, cur->value())) return i - first + 1;
  }
  return end - first;
}

expected<void> record_store::check_pages(const read_txn& txn, std::uint64_t first, std::uint64_t last) const {
  return pages_->check_keys(txn.raw(), "records", first, last);
}

expected<std::uint64_t> record_store::scan(std::uint64_t first, std::uint64_t n, const visit_fn& fn) const {
  record r;
  std::optional<error> bad;
  auto visited = scan_raw(first, n, [&](std::uint64_t i, std::string_view bytes) {
    if (auto d = decode_record(manifest_.schema, i, bytes, r, dir()); !d) {
      bad = d.err();
      return false;
    }
    return fn(i, r);
  });
  if (bad) return *bad;
  return visited;
}

expected<void> record_store::read_batch(std::uint64_t first, std::uint64_t n,
                                        std::vector<record>& out) const {
  std::size_t k = 0;
  auto visited = scan(first, n, [&](std::uint64_t, const record& r) {
    if (out.size() <= k) out.emplace_back();
    auto& o = out[k++];
    o.label = r.label;
    o.dense.assign(r.dense.begin(), r.dense.end());
    o.sparse.assign(r.sparse.begin(), r.sparse.end());
    return true;
  });
  if (!visited) return visited.err();
  out.resize(k);
  return {};
}

expected<record_writer> record_writer::create(const std::string& dir, record_schema schema,
                                              std::string source, writer_options opts) {
  if (fs::exists(fs::path(dir) / "data.mdb"))
    return make_unexpected(storage_errc::already_exists, dir + ": already holds a store (remove it first)");
  env_options eo;
  eo.initial_map_size = opts.initial_map_size;
  eo.no_sync = opts.no_sync;
  auto env = lmdb_env::open(dir, eo);
  if (!env) return env.err();
  record_writer w;
  w.env_ = std::move(*env);
  auto meta = w.env_->open_db("meta", MDB_CREATE);
  if (!meta) return meta.err();
  auto records = w.env_->open_db("records", MDB_CREATE | MDB_INTEGERKEY);
  if (!records) return records.err();
  w.meta_ = *meta;
  w.records_ = *records;
  w.manifest_.schema = std::move(schema);
  w.manifest_.source = std::move(source);
  w.txn_bytes_ = std::max<std::size_t>(opts.txn_bytes, encoded_size(w.manifest_.schema));
  if (auto r = w.flush(false); !r) return r.err();  // an empty, incomplete manifest marks the store
  return w;
}

expected<void> record_writer::append(const record& r) {
  if (finished_)
    return make_unexpected(storage_errc::invalid_argument, env_->dir() + ": append after finish");
  const std::uint64_t index = count();
  if (auto c = check_shape(manifest_.schema, index, r); !c) return error(c.err()).wrap(env_->dir());
  const std::size_t sz = encoded_size(manifest_.schema);
  pending_.resize(pending_.size() + sz);
  encode_record(manifest_.schema, index, r, pending_.data() + pending_.size() - sz);
  ++pending_count_;
  if (pending_.size() + sz > txn_bytes_) return flush(false);
  return {};
}

expected<manifest> record_writer::finish() {
  if (finished_) return make_unexpected(storage_errc::invalid_argument, env_->dir() + ": finish twice");
  if (auto r = flush(true); !r) return r.err();
  finished_ = true;
  return manifest_;
}

expected<void> record_writer::flush(bool complete) {
  manifest m = manifest_;
  m.record_count = committed_ + pending_count_;
  m.complete = complete;
  const std::string text = m.to_toml();
  const std::size_t sz = encoded_size(m.schema);
  auto r = env_->write([&](write_txn& w) -> expected<void> {
    for (std::uint64_t i = 0; i < pending_count_; ++i) {
      const std::uint64_t index = committed_ + i;
      auto p = w.put(records_, as_view(index), std::string_view(pending_.data() + i * sz, sz), MDB_APPEND);
      if (!p) return error(p.err()).wrap("record " + std::to_string(index));
    }
    return w.put(meta_, manifest_key, text);
  });
  if (!r) return r;
  committed_ += pending_count_;
  pending_count_ = 0;
  pending_.clear();
  manifest_ = m;
  return {};
}

}  // namespace troupe::storage
