#include <algorithm>

#include "checkpoint_codec.hpp"
#include "checkpoint_file.hpp"
#include "troupe/storage/checkpoint_store.hpp"

namespace troupe::storage {

namespace {
error corrupt(const std::string& dir, std::uint64_t v, const std::string& what) {
  return error(storage_errc::corrupt_checkpoint, dir + ": version " + std::to_string(v) + ": " + what);
}

// Applies one version's data onto `s` (dense tensors replaced, rows upserted).
expected<void> apply(const read_txn& txn, dbi data, const checkpoint_info& info, shard_state& s) {
  const std::string& dir = txn.env().dir();
  const std::string prefix = be64_key(info.version);
  auto cur = cursor::open(txn.raw(), data, dir);
  if (!cur) return cur.err();
  std::uint64_t n = 0;
  ckpt::data_key k;
  std::vector<float> v;
  for (auto ok = cur->seek(prefix);; ok = cur->next()) {
    if (!ok) return ok.err();
    if (!*ok || cur->key().substr(0, 8) != prefix) break;
    if (!ckpt::decode_key(cur->key(), k)) return corrupt(dir, info.version, "malformed key");
    const bool rows = k.sec == ckpt::embedding || k.sec == ckpt::embedding_slot;
    bool ok_value = false;
    if (rows) {
      auto& table = (k.sec == ckpt::embedding ? s.embeddings : s.embedding_slots)[k.name];
      ok_value = ckpt::decode_pack(cur->key(), cur->value(), [&](std::uint64_t id, std::vector<float>&& row) {
        table[id] = std::move(row);
      });
    } else if ((ok_value = ckpt::decode_value(cur->key(), cur->value(), v))) {
      (k.sec == ckpt::dense ? s.dense : s.dense_slots)[k.name] = v;
    }
    if (!ok_value)
      return corrupt(
          dir, info.version,
          "checksum mismatch in '" + k.name + "' " + (rows ? "rows from " : "row ") + std::to_string(k.row));
    ++n;
  }
  if (n != info.entries)
    return corrupt(dir, info.version,
                   std::to_string(n) + " entries, the header says " + std::to_string(info.entries));
  return {};
}

expected<checkpoint_info> header(const read_txn& txn, dbi versions, std::uint64_t v) {
  auto raw = txn.get(versions, be64_key(v));
  if (!raw) return raw.err();
  if (!*raw)
    return make_unexpected(storage_errc::not_found,
                           txn.env().dir() + ": checkpoint version " + std::to_string(v));
  checkpoint_info i;
  if (!ckpt::decode_info(**raw, i)) return corrupt(txn.env().dir(), v, "malformed header");
  return i;
}
}  // namespace

expected<shard_state> checkpoint_store::load(std::uint64_t version) const {
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  std::vector<checkpoint_info> chain;  // newest first
  for (std::uint64_t v = version;;) {
    auto i = header(*txn, versions_, v);
    if (!i) {
      if (v != version && i.err() == storage_errc::not_found)
        return corrupt(dir(), version, "chain broken at " + std::to_string(v));
      return i.err();
    }
    if (!i->complete) {
      if (v == version)
        return make_unexpected(storage_errc::not_found,
                               dir() + ": checkpoint version " + std::to_string(v) + " is incomplete");
      return corrupt(dir(), version, "chain member " + std::to_string(v) + " is incomplete");
    }
    chain.push_back(*i);
    if (i->kind == checkpoint_kind::full) break;
    if (i->parent >= v) return corrupt(dir(), v, "parent " + std::to_string(i->parent) + " is not older");
    v = i->parent;
  }
  shard_state s;
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    if (auto r = it->format == 1 ? apply(*txn, data_, *it, s) : ckpt_file::apply(dir(), *it, s); !r)
      return r.err();
  return s;
}

expected<shard_state> checkpoint_store::load_latest() const {
  auto l = latest();
  if (!l) return l.err();
  if (!*l) return make_unexpected(storage_errc::not_found, dir() + ": no checkpoint yet");
  return load(**l);
}

}  // namespace troupe::storage
