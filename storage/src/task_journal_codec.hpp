// Internals shared by task_journal.cpp (open, create, renew, expiry, reads) and
// task_journal_lease.cpp (leases, reports, the holder index): the task value codec, the durable
// counters and the holder index's keys. Not part of the storage API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bytes.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::storage::journal_detail {

// Version 2 appends order_attempt and trained; version 3 the step too. A task is written in the
// lowest version that holds it: with no rows trained and no step as version 1 (its order is its
// lease's own attempt's), so a journal without a hand-back stays readable by a build from before
// 2026-12-05 (a resumed job, `troupe status`), which took a newer value for a damaged journal; and
// with no step as version 2 (readable by a build from before 2026-12-06).
inline constexpr std::uint8_t task_version = 3;
// Counters kept in the same transactions as the transitions they count (journal_meta).
inline constexpr char requeued_key[] = "requeued", records_done_key[] = "records_done";
// Present once the holder index (db "by_holder") covers every DOING task.
inline constexpr char holder_index_key[] = "holder_index";
// LMDB's default maximum key is 511 bytes: the holder index key is the holder, a NUL and the id.
inline constexpr std::size_t max_holder = 400;

inline std::string encode(const task& t) {
  byte_writer w;
  const std::uint8_t version = t.step > 0 ? 3 : t.trained > 0 ? 2 : 1;
  w.pod(version).pod(t.id).pod(t.epoch).pod(t.first).pod(t.count).pod(static_cast<std::uint8_t>(t.state));
  w.pod(t.attempt).pod(t.failures).pod(t.deadline_ms).str(t.holder).str(t.last_error);
  if (version >= 2) w.pod(t.order_attempt).pod(t.trained);
  if (version >= 3) w.pod(t.step);
  return std::move(w.bytes());
}

inline expected<task> decode(std::string_view v, const std::string& where) {
  byte_reader r(v);
  task t;
  auto version = r.pod<std::uint8_t>();
  t.id = r.pod<std::uint64_t>();
  t.epoch = r.pod<std::uint32_t>();
  t.first = r.pod<std::uint64_t>();
  t.count = r.pod<std::uint64_t>();
  auto state = r.pod<std::uint8_t>();
  t.attempt = r.pod<std::uint32_t>();
  t.failures = r.pod<std::uint32_t>();
  t.deadline_ms = r.pod<std::int64_t>();
  t.holder = r.str();
  t.last_error = r.str();
  if (version >= 2) {
    t.order_attempt = r.pod<std::uint32_t>();
    t.trained = r.pod<std::uint64_t>();
  } else {
    t.order_attempt = t.attempt;
  }
  if (version >= 3) t.step = r.pod<std::uint64_t>();
  if (!r.done() || version < 1 || version > task_version || state > 3 || t.trained > t.count)
    return make_unexpected(storage_errc::lmdb_error, where + ": malformed task value");
  t.state = static_cast<task_state>(state);
  return t;
}

template <class Txn>
inline expected<std::uint64_t> counter_in(const Txn& txn, dbi db, const char* key) {
  auto v = txn.get(db, key);
  if (!v) return v.err();
  if (!*v || (*v)->size() != 8) return std::uint64_t{0};
  return from_be64(**v);
}

inline expected<void> add_counter(write_txn& w, dbi db, const char* key, std::uint64_t n) {
  if (n == 0) return {};
  auto c = counter_in(w, db, key);
  if (!c) return c.err();
  return w.put(db, key, be64_key(*c + n));
}

// Takes `n` off a counter (never below 0: a journal written before the counter was kept).
inline expected<void> lower_counter(write_txn& w, dbi db, const char* key, std::uint64_t n) {
  if (n == 0) return {};
  auto c = counter_in(w, db, key);
  if (!c) return c.err();
  return w.put(db, key, be64_key(*c - std::min(*c, n)));
}

template <class Txn>
inline expected<task> get_in(const Txn& txn, dbi db, std::uint64_t id, const std::string& dir) {
  auto v = txn.get(db, be64_key(id));
  if (!v) return v.err();
  if (!*v) return make_unexpected(storage_errc::not_found, dir + ": task " + std::to_string(id));
  return decode(**v, dir + ": task " + std::to_string(id));
}

// The holder index's key: the holder, a NUL (node names hold none), the task id; a holder's
// tasks are the keys that start with holder_prefix(holder).
inline std::string holder_prefix(const std::string& holder) {
  std::string k = holder;
  k.push_back('\0');
  return k;
}

inline std::string holder_key(const std::string& holder, std::uint64_t id) {
  return holder_prefix(holder) + be64_key(id);
}

// Writes `t` and moves its id between the state indexes when its state changed; a task entering
// or leaving DOING enters or leaves its holder's index (a DOING task never changes holder).
inline expected<void> store(write_txn& w, const dbi* dbs, const task& t, task_state old) {
  const dbi tasks = dbs[0], *by_state = dbs + 1, by_holder = dbs[5];
  const std::string key = be64_key(t.id);
  if (auto r = w.put(tasks, key, encode(t)); !r) return r;
  if (t.state == old) return {};
  if (auto r = w.del(by_state[static_cast<int>(old)], key); !r) return r.err();
  if (old == task_state::doing && by_holder != 0)  // 0: a journal open() found without the index
    if (auto r = w.del(by_holder, holder_key(t.holder, t.id)); !r) return r.err();
  if (t.state == task_state::doing && by_holder != 0)
    if (auto r = w.put(by_holder, holder_key(t.holder, t.id), {}); !r) return r;
  return w.put(by_state[static_cast<int>(t.state)], key, {});
}

// The ids under `prefix` in the holder index, inside `txn`.
inline expected<std::vector<std::uint64_t>> ids_held(MDB_txn* txn, dbi by_holder, const std::string& holder,
                                                     const std::string& dir) {
  std::vector<std::uint64_t> out;
  const std::string prefix = holder_prefix(holder);
  auto cur = cursor::open(txn, by_holder, dir);
  if (!cur) return cur.err();
  for (auto ok = cur->seek(prefix);; ok = cur->next()) {
    if (!ok) return ok.err();
    if (!*ok || !cur->key().starts_with(prefix) || cur->key().size() != prefix.size() + 8) break;
    out.push_back(from_be64(cur->key().substr(prefix.size())));
  }
  return out;
}

}  // namespace troupe::storage::journal_detail
