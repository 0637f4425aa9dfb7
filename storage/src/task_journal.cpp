#include "troupe/storage/task_journal.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "bytes.hpp"
#include "troupe/core/splitmix.hpp"

namespace troupe::storage {

namespace {
constexpr std::uint8_t task_version = 1, config_version = 1;
constexpr char config_key[] = "config";
// Counters kept in the same transactions as the transitions they count (journal_meta).
constexpr char requeued_key[] = "requeued", records_done_key[] = "records_done";
// Present once the holder index (db "by_holder") covers every DOING task.
constexpr char holder_index_key[] = "holder_index";
// LMDB's default maximum key is 511 bytes: the holder index key is the holder, a NUL and the id.
constexpr std::size_t max_holder = 400;
const char* state_db[4] = {"todo", "doing", "done", "failed"};

std::string encode(const task& t) {
  byte_writer w;
  w.pod(task_version)
      .pod(t.id)
      .pod(t.epoch)
      .pod(t.first)
      .pod(t.count)
      .pod(static_cast<std::uint8_t>(t.state));
  w.pod(t.attempt).pod(t.failures).pod(t.deadline_ms).str(t.holder).str(t.last_error);
  return std::move(w.bytes());
}

expected<task> decode(std::string_view v, const std::string& where) {
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
  if (!r.done() || version != task_version || state > 3)
    return make_unexpected(storage_errc::lmdb_error, where + ": malformed task value");
  t.state = static_cast<task_state>(state);
  return t;
}

std::string encode(const journal_options& o) {
  byte_writer w;
  w.pod(config_version).str(o.dataset).pod(o.record_count).pod(o.records_per_task).pod(o.epochs);
  w.pod(o.shuffle_seed).pod(static_cast<std::uint8_t>(o.shuffle)).pod(o.max_failures);
  return std::move(w.bytes());
}

expected<journal_options> decode_options(std::string_view v, const std::string& where) {
  byte_reader r(v);
  journal_options o;
  auto version = r.pod<std::uint8_t>();
  o.dataset = r.str();
  o.record_count = r.pod<std::uint64_t>();
  o.records_per_task = r.pod<std::uint64_t>();
  o.epochs = r.pod<std::uint32_t>();
  o.shuffle_seed = r.pod<std::uint64_t>();
  o.shuffle = r.pod<std::uint8_t>() != 0;
  o.max_failures = r.pod<std::uint32_t>();
  if (version != config_version)
    return make_unexpected(storage_errc::version_mismatch,
                           where + ": journal format " + std::to_string(version));
  if (!r.done()) return make_unexpected(storage_errc::lmdb_error, where + ": malformed journal config");
  return o;
}

// Differences that would change the tasks; max_failures may change on reopen.
std::string differs(const journal_options& a, const journal_options& b) {
  if (a.dataset != b.dataset) return "dataset '" + a.dataset + "' vs '" + b.dataset + "'";
  if (a.record_count != b.record_count) return "record_count";
  if (a.records_per_task != b.records_per_task) return "records_per_task";
  if (a.epochs != b.epochs) return "epochs";
  if (a.shuffle_seed != b.shuffle_seed || a.shuffle != b.shuffle) return "shuffle seed";
  return {};
}

template <class Txn>
expected<std::uint64_t> counter_in(const Txn& txn, dbi db, const char* key) {
  auto v = txn.get(db, key);
  if (!v) return v.err();
  if (!*v || (*v)->size() != 8) return std::uint64_t{0};
  return from_be64(**v);
}

expected<void> add_counter(write_txn& w, dbi db, const char* key, std::uint64_t n) {
  if (n == 0) return {};
  auto c = counter_in(w, db, key);
  if (!c) return c.err();
  return w.put(db, key, be64_key(*c + n));
}

template <class Txn>
expected<task> get_in(const Txn& txn, dbi db, std::uint64_t id, const std::string& dir) {
  auto v = txn.get(db, be64_key(id));
  if (!v) return v.err();
  if (!*v) return make_unexpected(storage_errc::not_found, dir + ": task " + std::to_string(id));
  return decode(**v, dir + ": task " + std::to_string(id));
}
}  // namespace

const char* to_string(task_state s) {
  static const char* names[4] = {"todo", "doing", "done", "failed"};
  return names[static_cast<int>(s) & 3];
}

expected<task_journal> task_journal::open_or_create(const std::string& dir, const journal_options& opts) {
  if (opts.record_count == 0 || opts.records_per_task == 0 || opts.epochs == 0 || opts.max_failures == 0)
    return make_unexpected(
        storage_errc::invalid_argument,
        dir + ": journal needs record_count, records_per_task, epochs and max_failures > 0");
  auto env = lmdb_env::open(dir);
  if (!env) return env.err();
  task_journal j;
  j.env_ = std::move(*env);
  if (auto r = j.load_dbs(true); !r) return r.err();
  j.opts_ = opts;
  j.per_epoch_ = (opts.record_count + opts.records_per_task - 1) / opts.records_per_task;
  auto r = j.env_->write([&](write_txn& w) -> expected<void> {
    auto v = w.get(j.meta_, config_key);
    if (!v) return v.err();
    if (*v) {
      auto o = decode_options(**v, dir);
      if (!o) return o.err();
      if (auto d = differs(*o, opts); !d.empty())
        return make_unexpected(storage_errc::invalid_argument,
                               dir + ": journal was created with other options (" + d + ")");
      return w.put(j.meta_, config_key, encode(opts));  // max_failures may change
    }
    if (auto c = j.create_tasks(w); !c) return c;
    if (auto h = w.put(j.meta_, holder_index_key, "1"); !h) return h;  // nothing DOING yet
    return w.put(j.meta_, config_key, encode(opts));
  });
  if (!r) return r.err();
  if (auto h = j.ensure_holder_index(); !h) return h.err();
  return j;
}

expected<task_journal> task_journal::open(const std::string& dir) {
  if (!std::filesystem::exists(std::filesystem::path(dir) / "data.mdb"))
    return make_unexpected(storage_errc::not_found, dir + ": no task journal");
  auto env = lmdb_env::open(dir);
  if (!env) return env.err();
  task_journal j;
  j.env_ = std::move(*env);
  if (auto r = j.load_dbs(false); !r)
    return make_unexpected(storage_errc::not_found, dir + ": no task journal");
  auto txn = j.env_->begin_read();
  if (!txn) return txn.err();
  auto v = txn->get(j.meta_, config_key);
  if (!v) return v.err();
  if (!*v) return make_unexpected(storage_errc::not_found, dir + ": no task journal");
  auto o = decode_options(**v, dir);
  if (!o) return o.err();
  j.opts_ = *o;
  j.per_epoch_ = (o->record_count + o->records_per_task - 1) / o->records_per_task;
  auto flag = txn->get(j.meta_, holder_index_key);
  if (!flag) return flag.err();
  j.indexed_ = j.by_holder_ != 0 && *flag;  // else lease and requeue_holder* refuse (open_or_create)
  return j;
}

expected<void> task_journal::load_dbs(bool create) {
  unsigned flag = create ? MDB_CREATE : 0;
  auto t = env_->open_db("tasks", flag);
  auto m = env_->open_db("journal_meta", flag);
  if (!t) return t.err();
  if (!m) return m.err();
  tasks_ = *t;
  meta_ = *m;
  for (int s = 0; s < 4; ++s) {
    auto d = env_->open_db(state_db[s], flag);
    if (!d) return d.err();
    by_state_[s] = *d;
  }
  // Absent in a journal that predates it (and not created by open(), which only reads).
  auto h = env_->open_db("by_holder", flag);
  if (!h && create) return h.err();
  by_holder_ = h ? *h : 0;
  dbs_[0] = tasks_;
  for (int s = 0; s < 4; ++s) dbs_[s + 1] = by_state_[s];
  dbs_[5] = by_holder_;
  return {};
}

expected<void> task_journal::create_tasks(write_txn& w) const {
  std::vector<std::uint64_t> order(per_epoch_);
  for (std::uint32_t e = 0; e < opts_.epochs; ++e) {
    std::iota(order.begin(), order.end(), 0);
    std::uint64_t s = opts_.shuffle_seed * 0x100000001b3ULL + e;
    for (std::uint64_t i = per_epoch_; opts_.shuffle && i > 1; --i)
      std::swap(order[i - 1], order[splitmix64_next(s) % i]);
    for (std::uint64_t k = 0; k < per_epoch_; ++k) {
      task t;
      t.id = e * per_epoch_ + k;
      t.epoch = e;
      t.first = order[k] * opts_.records_per_task;
      t.count = std::min(opts_.records_per_task, opts_.record_count - t.first);
      if (auto r = w.put(tasks_, be64_key(t.id), encode(t)); !r) return r;
      if (auto r = w.put(by_state_[0], be64_key(t.id), {}); !r) return r;
    }
  }
  return {};
}

namespace {
// The holder index's key: the holder, a NUL (node names hold none), the task id; a holder's
// tasks are the keys that start with holder_prefix(holder).
std::string holder_prefix(const std::string& holder) {
  std::string k = holder;
  k.push_back('\0');
  return k;
}

std::string holder_key(const std::string& holder, std::uint64_t id) {
  return holder_prefix(holder) + be64_key(id);
}

// Writes `t` and moves its id between the state indexes when its state changed; a task entering
// or leaving DOING enters or leaves its holder's index (a DOING task never changes holder).
expected<void> store(write_txn& w, const dbi* dbs, const task& t, task_state old) {
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
expected<std::vector<std::uint64_t>> ids_held(MDB_txn* txn, dbi by_holder, const std::string& holder,
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
}  // namespace

error task_journal::unindexed() const {
  return make_unexpected(storage_errc::invalid_argument,
                         env_->dir() + ": the journal has no holder index (open_or_create builds it)")
      .err;
}

expected<void> task_journal::write(const write_fn& fn) {
  writes_->fetch_add(1, std::memory_order_relaxed);
  return env_->write(fn);
}

expected<void> task_journal::ensure_holder_index() {
  auto r = write([&](write_txn& w) -> expected<void> {
    auto flag = w.get(meta_, holder_index_key);
    if (!flag) return flag.err();
    if (*flag) return {};
    if (auto c = w.clear(by_holder_); !c) return c;
    auto cur = cursor::open(w.raw(), by_state_[1], env_->dir());
    if (!cur) return cur.err();
    for (auto ok = cur->first();; ok = cur->next()) {
      if (!ok) return ok.err();
      if (!*ok) break;
      auto t = get_in(w, tasks_, from_be64(cur->key()), env_->dir());
      if (!t) return t.err();
      if (auto p = w.put(by_holder_, holder_key(t->holder, t->id), {}); !p) return p;
    }
    return w.put(meta_, holder_index_key, "1");
  });
  if (r) indexed_ = true;
  return r;
}

expected<std::optional<task>> task_journal::lease_in(write_txn& w, const std::string& holder,
                                                     std::int64_t deadline_ms) const {
  if (!indexed_) return unindexed();
  if (holder.size() > max_holder || holder.find('\0') != std::string::npos)
    return make_unexpected(storage_errc::invalid_argument, env_->dir() + ": lease holder name longer than " +
                                                               std::to_string(max_holder) +
                                                               " bytes or holding a NUL");
  auto cur = cursor::open(w.raw(), by_state_[0], env_->dir());
  if (!cur) return cur.err();
  auto ok = cur->first();
  if (!ok) return ok.err();
  if (!*ok) return std::optional<task>();
  auto t = get_in(w, tasks_, from_be64(cur->key()), env_->dir());
  if (!t) return t.err();
  t->state = task_state::doing;
  t->holder = holder;
  t->deadline_ms = deadline_ms;
  ++t->attempt;
  if (auto s = store(w, dbs_, *t, task_state::todo); !s) return s.err();
  return std::optional<task>(std::move(*t));
}

expected<std::uint64_t> task_journal::requeue_held(write_txn& w, const std::string& holder,
                                                   const std::vector<std::uint64_t>& keep) const {
  if (!indexed_) return unindexed();
  auto ids = ids_held(w.raw(), by_holder_, holder, env_->dir());
  if (!ids) return ids.err();
  std::uint64_t moved = 0;
  for (auto id : *ids) {
    if (std::find(keep.begin(), keep.end(), id) != keep.end()) continue;
    auto t = get_in(w, tasks_, id, env_->dir());
    if (!t) return t.err();
    t->state = task_state::todo;
    t->deadline_ms = 0;
    if (auto s = store(w, dbs_, *t, task_state::doing); !s) return s.err();
    ++moved;
  }
  if (auto a = add_counter(w, meta_, requeued_key, moved); !a) return a.err();
  return moved;
}

expected<std::optional<task>> task_journal::lease(const std::string& holder, std::int64_t deadline_ms) {
  std::optional<task> out;
  auto r = write([&](write_txn& w) -> expected<void> {
    auto t = lease_in(w, holder, deadline_ms);
    if (!t) return t.err();
    out = std::move(*t);
    return {};
  });
  if (!r) return r.err();
  return out;
}

expected<lease_outcome> task_journal::lease(const lease_request& r) {
  auto b = lease_batch({r});
  if (!b) return b.err();
  return std::move(b->front());
}

expected<std::vector<lease_outcome>> task_journal::lease_batch(const std::vector<lease_request>& rs) {
  auto out = apply(journal_batch{{}, rs});
  if (!out) return out.err();
  return std::move(out->leases);
}

expected<void> task_journal::check_lease(const task& t, const std::string& holder,
                                         std::uint32_t attempt) const {
  if (t.state == task_state::doing && t.holder == holder && t.attempt == attempt) return {};
  return make_unexpected(
      storage_errc::stale_lease,
      env_->dir() + ": task " + std::to_string(t.id) + " is " + to_string(t.state) +
          (t.state == task_state::doing ? " by '" + t.holder + "' attempt " + std::to_string(t.attempt)
                                        : std::string()) +
          ", not leased by '" + holder + "' attempt " + std::to_string(attempt));
}

expected<void> task_journal::renew(std::uint64_t id, const std::string& holder, std::uint32_t attempt,
                                   std::int64_t deadline_ms) {
  return write([&](write_txn& w) -> expected<void> {
    auto t = get_in(w, tasks_, id, env_->dir());
    if (!t) return t.err();
    if (auto c = check_lease(*t, holder, attempt); !c) return c;
    t->deadline_ms = deadline_ms;
    return store(w, dbs_, *t, t->state);
  });
}

expected<task_state> task_journal::report_in(write_txn& w, const report_request& r) const {
  auto t = get_in(w, tasks_, r.id, env_->dir());
  if (!t) return t.err();
  if (auto c = check_lease(*t, r.holder, r.attempt); !c) return c.err();
  t->deadline_ms = 0;
  if (r.failed) {
    ++t->failures;
    t->last_error = r.error_text;
    t->state = t->failures >= opts_.max_failures ? task_state::failed : task_state::todo;
  } else {
    t->state = task_state::done;
    if (auto a = add_counter(w, meta_, records_done_key, t->count); !a) return a.err();
  }
  if (auto s = store(w, dbs_, *t, task_state::doing); !s) return s.err();
  return t->state;
}

expected<void> task_journal::complete(std::uint64_t id, const std::string& holder, std::uint32_t attempt) {
  return write([&](write_txn& w) -> expected<void> {
    auto s = report_in(w, report_request{id, holder, attempt, false, {}});
    if (!s) return s.err();
    return {};
  });
}

expected<task_state> task_journal::fail(std::uint64_t id, const std::string& holder, std::uint32_t attempt,
                                        const std::string& error_text) {
  task_state next = task_state::todo;
  auto r = write([&](write_txn& w) -> expected<void> {
    auto s = report_in(w, report_request{id, holder, attempt, true, error_text});
    if (!s) return s.err();
    next = *s;
    return {};
  });
  if (!r) return r.err();
  return next;
}

expected<batch_outcome> task_journal::apply(const journal_batch& b) {
  batch_outcome out;
  auto r = write([&](write_txn& w) -> expected<void> {
    out = batch_outcome{};  // the function may run again (the map grew)
    for (const auto& rep : b.reports) {
      auto s = report_in(w, rep);
      // A report the journal refuses (stale, unknown task) changed nothing: the others go on.
      if (!s && !(s.err() == storage_errc::stale_lease) && !(s.err() == storage_errc::not_found))
        return s.err();
      out.reports.push_back(std::move(s));
    }
    for (const auto& l : b.leases) {
      lease_outcome o;
      auto n = requeue_held(w, l.holder, l.keep);
      if (!n) return n.err();
      o.requeued = *n;
      auto t = lease_in(w, l.holder, l.deadline_ms);
      if (!t) return t.err();
      o.leased = std::move(*t);
      out.leases.push_back(std::move(o));
    }
    return {};
  });
  if (!r) return r.err();
  return out;
}

expected<std::uint64_t> task_journal::requeue_if(const std::function<bool(const task&)>& pred) {
  std::uint64_t moved = 0;
  auto r = write([&](write_txn& w) -> expected<void> {
    moved = 0;
    std::vector<task> hit;
    {
      auto cur = cursor::open(w.raw(), by_state_[1], env_->dir());
      if (!cur) return cur.err();
      for (auto ok = cur->first();; ok = cur->next()) {
        if (!ok) return ok.err();
        if (!*ok) break;
        auto t = get_in(w, tasks_, from_be64(cur->key()), env_->dir());
        if (!t) return t.err();
        if (pred(*t)) hit.push_back(std::move(*t));
      }
    }
    for (auto& t : hit) {
      t.state = task_state::todo;
      t.deadline_ms = 0;
      if (auto s = store(w, dbs_, t, task_state::doing); !s) return s;
    }
    moved = hit.size();
    return add_counter(w, meta_, requeued_key, moved);
  });
  if (!r) return r.err();
  return moved;
}

expected<std::uint64_t> task_journal::requeue_holder(const std::string& holder) {
  return requeue_holder_except(holder, {});
}

expected<std::uint64_t> task_journal::requeue_holder_except(const std::string& holder,
                                                            const std::vector<std::uint64_t>& keep) {
  std::uint64_t moved = 0;
  auto r = write([&](write_txn& w) -> expected<void> {
    auto n = requeue_held(w, holder, keep);
    if (!n) return n.err();
    moved = *n;
    return {};
  });
  if (!r) return r.err();
  return moved;
}

expected<std::uint64_t> task_journal::requeue_expired(std::int64_t now_ms) {
  return requeue_if([&](const task& t) { return t.deadline_ms <= now_ms; });
}

expected<std::vector<std::uint64_t>> task_journal::held_by(const std::string& holder) const {
  if (!indexed_) return unindexed();
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  return ids_held(txn->raw(), by_holder_, holder, env_->dir());
}

expected<task> task_journal::get(std::uint64_t id) const {
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  return get_in(*txn, tasks_, id, env_->dir());
}

expected<task_counts> task_journal::counts() const {
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  task_counts c;
  std::uint64_t* n[4] = {&c.todo, &c.doing, &c.done, &c.failed};
  for (int s = 0; s < 4; ++s) {
    auto e = txn->entries(by_state_[s]);
    if (!e) return e.err();
    *n[s] = *e;
  }
  auto requeued = counter_in(*txn, meta_, requeued_key);
  if (!requeued) return requeued.err();
  auto records = counter_in(*txn, meta_, records_done_key);
  if (!records) return records.err();
  c.requeued = *requeued;
  c.records_done = *records;
  return c;
}

expected<std::vector<task>> task_journal::list(task_state state) const {
  auto txn = env_->begin_read();
  if (!txn) return txn.err();
  auto cur = cursor::open(txn->raw(), by_state_[static_cast<int>(state)], env_->dir());
  if (!cur) return cur.err();
  std::vector<task> out;
  for (auto ok = cur->first();; ok = cur->next()) {
    if (!ok) return ok.err();
    if (!*ok) break;
    auto t = get_in(*txn, tasks_, from_be64(cur->key()), env_->dir());
    if (!t) return t.err();
    out.push_back(std::move(*t));
  }
  return out;
}

}  // namespace troupe::storage
