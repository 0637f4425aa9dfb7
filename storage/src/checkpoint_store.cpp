#include "troupe/storage/checkpoint_store.hpp"

#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "checkpoint_codec.hpp"
#include "checkpoint_file.hpp"

namespace troupe::storage {

namespace {
constexpr char latest_key[] = "latest";
constexpr std::size_t delete_batch = std::size_t{1} << 16;  // keys deleted per transaction

// Removes `path`; a file already gone is no error.
expected<void> unlink_file(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return {};
  return make_unexpected(storage_errc::io_error, path + " (unlink): " + std::strerror(errno));
}

expected<std::optional<std::uint64_t>> read_latest(const auto& txn, dbi meta) {
  auto v = txn.get(meta, latest_key);
  if (!v) return v.err();
  if (!*v || (*v)->size() != 8) return std::optional<std::uint64_t>();
  return std::optional<std::uint64_t>(from_be64(**v));
}

// The rows of `tables` flat, one flat_rows per table and row width (widths may differ within a
// table), each in ascending id order.
std::vector<flat_rows> flatten(const embedding_tables& tables) {
  std::vector<flat_rows> out;
  for (const auto& [name, t] : tables) {
    std::map<std::size_t, std::vector<std::uint64_t>> by_width;
    for (const auto& [id, row] : t) by_width[row.size()].push_back(id);
    for (auto& [width, ids] : by_width) {
      std::sort(ids.begin(), ids.end());
      flat_rows f;
      f.name = name;
      f.width = width;
      f.values.reserve(ids.size() * width);
      for (auto id : ids) {
        const auto& row = t.at(id);
        f.values.insert(f.values.end(), row.begin(), row.end());
      }
      f.ids = std::move(ids);
      out.push_back(std::move(f));
    }
  }
  return out;
}

const std::string& name_of(const std::pair<std::string, std::vector<float>>& d) {
  return d.first;
}
const std::string& name_of(const flat_rows& r) {
  return r.name;
}

bool name_too_long(const flat_state& s) {
  auto check = [](const auto& list) {
    for (const auto& e : list)
      if (std::string_view(name_of(e)).size() > 0xffff) return true;
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
  flat_state f;
  for (auto [from, to] : {std::pair{&s.dense, &f.dense}, std::pair{&s.dense_slots, &f.dense_slots}})
    for (const auto& [name, v] : *from) to->emplace_back(name, v);
  f.embeddings = flatten(s.embeddings);
  f.embedding_slots = flatten(s.embedding_slots);
  return write(f, kind);
}

expected<std::uint64_t> checkpoint_store::write(const flat_state& s, checkpoint_kind kind) {
  if (name_too_long(s))
    return make_unexpected(storage_errc::invalid_argument,
                           env_->dir() + ": tensor name longer than 65535 bytes");
  checkpoint_info info;
  info.kind = kind;
  {
    auto txn = env_->begin_read();
    if (!txn) return txn.err();
    auto latest = read_latest(*txn, meta_);
    if (!latest) return latest.err();
    if (kind == checkpoint_kind::incremental && !*latest)
      return make_unexpected(storage_errc::not_found,
                             env_->dir() + ": incremental checkpoint without a latest one");
    auto cur = cursor::open(txn->raw(), versions_, env_->dir());
    if (!cur) return cur.err();
    auto last = cur->last();
    if (!last) return last.err();
    info.version = std::max(*last ? from_be64(cur->key()) : 0, latest->value_or(0)) + 1;
    info.parent = kind == checkpoint_kind::incremental ? **latest : 0;
  }
  // The data first (fsynced, renamed into place), then its header and latest in one transaction:
  // a crash in between leaves a file that no header owns, which open() removes.
  if (auto d = ckpt_file::write(env_->dir(), info.version, s, info); !d) return d.err();
  info.complete = true;
  auto r = env_->write([&](write_txn& w) -> expected<void> {
    if (auto p = w.put(versions_, be64_key(info.version), ckpt::encode_info(info)); !p) return p;
    return w.put(meta_, latest_key, be64_key(info.version));
  });
  if (!r) {
    ::unlink(ckpt_file::path_of(env_->dir(), info.version).c_str());
    return r.err();
  }
  if (opts_.keep_full > 0) {
    if (auto c = collect(opts_.keep_full); !c)
      spdlog::warn("checkpoint collection failed: {}", c.err().to_string());
  }
  return info.version;
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
  if (auto r = remove_stray_files(); !r) return r.err();
  return removed;
}

expected<void> checkpoint_store::remove_stray_files() {
  auto all = list();
  if (!all) return all.err();
  std::set<std::uint64_t> owned;
  for (auto& i : *all)
    if (i.complete && i.format == 2) owned.insert(i.version);
  for (auto& f : ckpt_file::list(env_->dir()))
    if (f.temporary || !owned.contains(f.version))
      if (auto u = unlink_file(f.path); !u) return u;
  return {};
}

namespace {

// The first step of removing a version, in `w`. A version whose data is a file (format 2): its
// record goes (`file_only` set; the caller removes the file). Data in the database (format 1): the
// version is unmarked, so a crash halfway through its removal leaves an incomplete version, never a
// partial one. Nothing when the version is unknown or already unmarked.
expected<void> unmark_version(write_txn& w, dbi versions, const std::string& vkey, bool& file_only) {
  auto v = w.get(versions, vkey);
  if (!v) return v.err();
  checkpoint_info i;
  if (!*v || !ckpt::decode_info(**v, i)) return {};
  if (i.format == 2) {
    file_only = true;
    auto d = w.del(versions, vkey);
    return d ? expected<void>() : expected<void>(d.err());
  }
  if (!i.complete) return {};
  i.complete = false;
  return w.put(versions, vkey, ckpt::encode_info(i));
}

// A format-1 version's rows (keys prefixed by `vkey`) deleted from `data`, delete_batch keys a
// commit, then its record from `versions`.
expected<void> delete_rows(lmdb_env& env, dbi data, dbi versions, const std::string& vkey) {
  expected<void> r;
  for (bool more = true; r && more;) {
    r = env.write([&](write_txn& w) -> expected<void> {
      std::size_t n = 0;
      {
        auto cur = cursor::open(w.raw(), data, env.dir());
        if (!cur) return cur.err();
        for (auto ok = cur->seek(vkey); n < delete_batch; ok = cur->next(), ++n) {
          if (!ok) return ok.err();
          if (!*ok || cur->key().substr(0, 8) != vkey) break;
          if (auto d = cur->del(); !d) return d;
        }
      }
      more = n == delete_batch;
      if (more) return {};
      auto d = w.del(versions, vkey);
      return d ? expected<void>() : expected<void>(d.err());
    });
  }
  return r;
}

}  // namespace

// A version whose data is a file (format 2): its record goes in one commit, then the file; a crash
// in between leaves a file that no record owns, which the next collect() or open() removes (as
// after a crash inside write()). One commit instead of two: a ring checkpoint's write removes the
// version it supersedes, and each commit is two syncs. A format-1 version: unmarked, a file of its
// number removed (if any), then its rows and record.
expected<void> checkpoint_store::remove_version(std::uint64_t version) {
  const std::string vkey = be64_key(version);
  bool file_only = false;
  auto r = env_->write([&](write_txn& w) { return unmark_version(w, versions_, vkey, file_only); });
  if (!r) return r;
  if (auto u = unlink_file(ckpt_file::path_of(env_->dir(), version)); !u || file_only) return u;
  return delete_rows(*env_, data_, versions_, vkey);
}

}  // namespace troupe::storage
