#include "troupe/storage/checkpoint_store.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "checkpoint_codec.hpp"

namespace troupe::storage {

namespace {
constexpr char latest_key[] = "latest";
constexpr std::size_t delete_batch = std::size_t{1} << 16;  // keys deleted per transaction

expected<std::optional<std::uint64_t>> read_latest(const auto& txn, dbi meta) {
  auto v = txn.get(meta, latest_key);
  if (!v) return v.err();
  if (!*v || (*v)->size() != 8) return std::optional<std::uint64_t>();
  return std::optional<std::uint64_t>(from_be64(**v));
}

// The entries of one checkpoint: keys packed in one arena, each with the floats it stores
// (owned by the caller's state, which outlives every write job of write_data).
struct entry_list {
  std::string arena;  // all keys, back to back
  struct entry {
    std::size_t at, len;                // the key in the arena
    const std::vector<float>* values;   // a dense tensor, or nullptr for a pack of rows
    std::size_t first_row, count, dim;  // the pack: rows[first_row, first_row + count)
  };
  std::vector<entry> items;
  std::vector<ckpt::row_ref> rows;
  std::string_view key(const entry& e) const { return {arena.data() + e.at, e.len}; }
  std::size_t value_size(const entry& e) const {
    return e.values ? ckpt::value_size(e.values->size()) : ckpt::pack_size(e.count, e.dim);
  }
  std::size_t floats(const entry& e) const { return e.values ? e.values->size() : e.count * e.dim; }
};

// Every value of `s` under `version`, in key order: the keys of a new version sort after all
// existing ones (versions only grow), so they can be appended (MDB_APPEND) without tree search.
entry_list entries_of(std::uint64_t version, const shard_state& s) {
  entry_list out;
  auto add = [&](ckpt::section sec, const std::string& name, std::uint64_t row, entry_list::entry e) {
    e.at = out.arena.size();
    ckpt::append_key(out.arena, version, sec, name, row);
    e.len = out.arena.size() - e.at;
    out.items.push_back(e);
  };
  // Key order within a section: name length, name, row id (see encode_key).
  auto by_key = [](const std::string* a, const std::string* b) {
    return a->size() != b->size() ? a->size() < b->size() : *a < *b;
  };
  auto dense = [&](ckpt::section sec, const dense_tensors& m) {
    std::vector<const std::string*> names;
    for (auto& kv : m) names.push_back(&kv.first);
    std::sort(names.begin(), names.end(), by_key);
    for (auto* n : names) add(sec, *n, 0, {0, 0, &m.at(*n), 0, 0, 0});
  };
  auto tables = [&](ckpt::section sec, const embedding_tables& m) {
    std::vector<const std::string*> names;
    for (auto& kv : m) names.push_back(&kv.first);
    std::sort(names.begin(), names.end(), by_key);
    for (auto* n : names) {
      const std::size_t begin = out.rows.size();
      for (auto& [id, row] : m.at(*n)) out.rows.emplace_back(id, &row);
      std::sort(out.rows.begin() + static_cast<std::ptrdiff_t>(begin), out.rows.end());
      // Packs of consecutive rows of equal width.
      for (std::size_t i = begin; i < out.rows.size();) {
        const std::size_t dim = out.rows[i].second->size(), cap = ckpt::rows_per_pack(dim);
        std::size_t j = i + 1;
        while (j < out.rows.size() && j - i < cap && out.rows[j].second->size() == dim) ++j;
        add(sec, *n, out.rows[i].first, {0, 0, nullptr, i, j - i, dim});
        i = j;
      }
    }
  };
  dense(ckpt::dense, s.dense);
  tables(ckpt::embedding, s.embeddings);
  dense(ckpt::dense_slot, s.dense_slots);
  tables(ckpt::embedding_slot, s.embedding_slots);
  return out;
}

bool name_too_long(const shard_state& s) {
  auto check = [](const auto& m) {
    for (auto& kv : m)
      if (kv.first.size() > 0xffff) return true;
    return false;
  };
  return check(s.dense) || check(s.embeddings) || check(s.dense_slots) || check(s.embedding_slots);
}
}  // namespace

expected<checkpoint_store> checkpoint_store::open(const std::string& dir, checkpoint_options opts) {
  auto env = lmdb_env::open(dir, opts.env);
  if (!env) return env.err();
  checkpoint_store s;
  s.env_ = std::move(*env);
  s.opts_ = opts;
  auto v = s.env_->open_db("ckpt_versions", MDB_CREATE);
  auto d = s.env_->open_db("ckpt_data", MDB_CREATE);
  auto m = s.env_->open_db("ckpt_meta", MDB_CREATE);
  if (!v) return v.err();
  if (!d) return d.err();
  if (!m) return m.err();
  s.versions_ = *v;
  s.data_ = *d;
  s.meta_ = *m;
  if (auto r = s.collect(0); !r) return r.err();  // leftovers of a crashed write or collection
  return s;
}

expected<std::uint64_t> checkpoint_store::write(const shard_state& s, checkpoint_kind kind) {
  checkpoint_info info;
  info.kind = kind;
  auto r = env_->write([&](write_txn& w) -> expected<void> {
    auto latest = read_latest(w, meta_);
    if (!latest) return latest.err();
    if (kind == checkpoint_kind::incremental && !*latest)
      return make_unexpected(storage_errc::not_found,
                             env_->dir() + ": incremental checkpoint without a latest one");
    auto cur = cursor::open(w.raw(), versions_, env_->dir());
    if (!cur) return cur.err();
    auto last = cur->last();
    if (!last) return last.err();
    info.version = std::max(*last ? from_be64(cur->key()) : 0, latest->value_or(0)) + 1;
    info.parent = kind == checkpoint_kind::incremental ? **latest : 0;
    return w.put(versions_, be64_key(info.version), ckpt::encode_info(info));
  });
  if (!r) return r.err();
  if (auto d = write_data(info.version, s, info); !d) {
    (void)remove_version(info.version);
    return d.err();
  }
  info.complete = true;
  r = env_->write([&](write_txn& w) -> expected<void> {
    if (auto p = w.put(versions_, be64_key(info.version), ckpt::encode_info(info)); !p) return p;
    return w.put(meta_, latest_key, be64_key(info.version));
  });
  if (!r) {
    (void)remove_version(info.version);
    return r.err();
  }
  if (opts_.keep_full > 0) {
    if (auto c = collect(opts_.keep_full); !c)
      spdlog::warn("checkpoint collection failed: {}", c.err().to_string());
  }
  return info.version;
}

expected<void> checkpoint_store::write_data(std::uint64_t version, const shard_state& s,
                                            checkpoint_info& info) {
  if (name_too_long(s))
    return make_unexpected(storage_errc::invalid_argument,
                           env_->dir() + ": tensor name longer than 65535 bytes");
  auto all = std::make_shared<const entry_list>(entries_of(version, s));
  // Chunks go to the writer one after the other; values are encoded straight into the map.
  std::future<expected<void>> in_flight;
  for (std::size_t at = 0; at < all->items.size();) {
    std::size_t first = at;
    for (std::size_t bytes = 0; at < all->items.size() && bytes < opts_.chunk_bytes; ++at) {
      bytes += all->value_size(all->items[at]);
      info.bytes += 4 * all->floats(all->items[at]);
    }
    info.entries += at - first;
    if (in_flight.valid())
      if (auto r = in_flight.get(); !r) return r;
    in_flight = env_->submit([all, first, end = at, db = data_](write_txn& w) -> expected<void> {
      for (std::size_t i = first; i < end; ++i) {
        auto& e = all->items[i];
        auto k = all->key(e);
        auto out = w.reserve(db, k, all->value_size(e), MDB_APPEND);
        if (!out) return out.err();
        if (e.values)
          ckpt::encode_value(k, *e.values, *out);
        else
          ckpt::encode_pack(k, all->rows.data() + e.first_row, e.count, e.dim, *out);
      }
      return {};
    });
  }
  return in_flight.valid() ? in_flight.get() : expected<void>();
}

expected<std::optional<std::uint64_t>> checkpoint_store::latest() const {
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  return read_latest(*txn, meta_);
}

expected<std::vector<checkpoint_info>> checkpoint_store::list() const {
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  auto cur = cursor::open(txn->raw(), versions_, env_->dir());
  if (!cur) return cur.err();
  std::vector<checkpoint_info> out;
  for (auto ok = cur->first();; ok = cur->next()) {
    if (!ok) return ok.err();
    if (!*ok) break;
    checkpoint_info i;
    if (!ckpt::decode_info(cur->value(), i))
      return make_unexpected(
          storage_errc::corrupt_checkpoint,
          env_->dir() + ": version " + std::to_string(from_be64(cur->key())) + ": malformed header");
    i.version = from_be64(cur->key());  // the key is authoritative
    out.push_back(i);
  }
  return out;
}

expected<std::uint64_t> checkpoint_store::collect(std::uint32_t keep_full) {
  auto all = list();
  if (!all) return all.err();
  auto latest_v = latest();
  if (!latest_v) return latest_v.err();
  std::vector<std::uint64_t> fulls;  // complete fulls, newest first
  for (auto it = all->rbegin(); it != all->rend(); ++it)
    if (it->complete && it->kind == checkpoint_kind::full) fulls.push_back(it->version);
  std::uint64_t cutoff = keep_full > 0 && fulls.size() > keep_full ? fulls[keep_full - 1] : 0;
  if (*latest_v) cutoff = std::min(cutoff, **latest_v);  // never the latest or its chain
  std::uint64_t removed = 0;
  for (auto& i : *all) {
    if (*latest_v && i.version == **latest_v) continue;
    if (i.version < cutoff || !i.complete) {
      if (auto r = remove_version(i.version); !r) return r.err();
      ++removed;
    }
  }
  return removed;
}

expected<void> checkpoint_store::remove_version(std::uint64_t version) {
  const std::string vkey = be64_key(version);
  // First unmark it, so a crash halfway through leaves an incomplete version, never a partial one.
  auto r = env_->write([&](write_txn& w) -> expected<void> {
    auto v = w.get(versions_, vkey);
    if (!v) return v.err();
    checkpoint_info i;
    if (!*v || !ckpt::decode_info(**v, i) || !i.complete) return {};
    i.complete = false;
    return w.put(versions_, vkey, ckpt::encode_info(i));
  });
  for (bool more = true; r && more;) {
    r = env_->write([&](write_txn& w) -> expected<void> {
      std::size_t n = 0;
      {
        auto cur = cursor::open(w.raw(), data_, env_->dir());
        if (!cur) return cur.err();
        for (auto ok = cur->seek(vkey); n < delete_batch; ok = cur->next(), ++n) {
          if (!ok) return ok.err();
          if (!*ok || cur->key().substr(0, 8) != vkey) break;
          if (auto d = cur->del(); !d) return d;
        }
      }
      more = n == delete_batch;
      if (more) return {};
      auto d = w.del(versions_, vkey);
      return d ? expected<void>() : expected<void>(d.err());
    });
  }
  return r;
}

}  // namespace troupe::storage
