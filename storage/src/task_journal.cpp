#include "troupe/storage/task_journal.hpp"

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <optional>

#include "bytes.hpp"
#include "task_journal_codec.hpp"
#include "troupe/core/splitmix.hpp"

namespace troupe::storage {

using namespace journal_detail;

namespace {
constexpr std::uint8_t config_version = 1;
constexpr char config_key[] = "config";
const char* state_db[4] = {"todo", "doing", "done", "failed"};

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

}  // namespace

// Differences that would change the tasks; max_failures may change on reopen.
std::optional<journal_option_difference> journal_difference(const journal_options& made,
                                                            const journal_options& now) {
  auto n = [](auto v) { return std::to_string(v); };
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  if (made.dataset != now.dataset)
    return journal_option_difference{"dataset", "'" + made.dataset + "'", "'" + now.dataset + "'"};
  if (made.record_count != now.record_count)
    return journal_option_difference{"record_count", n(made.record_count), n(now.record_count)};
  if (made.records_per_task != now.records_per_task)
    return journal_option_difference{"records_per_task", n(made.records_per_task), n(now.records_per_task)};
  if (made.epochs != now.epochs) return journal_option_difference{"epochs", n(made.epochs), n(now.epochs)};
  if (made.shuffle != now.shuffle)
    return journal_option_difference{"shuffle", b(made.shuffle), b(now.shuffle)};
  if (made.shuffle && made.shuffle_seed != now.shuffle_seed)
    return journal_option_difference{"shuffle_seed", n(made.shuffle_seed), n(now.shuffle_seed)};
  return std::nullopt;
}

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
      if (auto d = journal_difference(*o, opts))
        return make_unexpected(storage_errc::invalid_argument,
                               dir + ": journal was created with other options (" + d->field + " " + d->made +
                                   " vs " + d->now + ")");
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
    auto doing = select_in(w, task_state::doing, [](const task&) { return true; });
    if (!doing) return doing.err();
    for (const auto& t : *doing)
      if (auto p = w.put(by_holder_, holder_key(t.holder, t.id), {}); !p) return p;
    return w.put(meta_, holder_index_key, "1");
  });
  if (r) indexed_ = true;
  return r;
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

expected<std::uint64_t> task_journal::requeue_if(const std::function<bool(const task&)>& pred) {
  return move_to_todo(task_state::doing, pred);
}

expected<std::uint64_t> task_journal::reopen(task_state from) {
  if (from != task_state::done && from != task_state::failed)
    return make_unexpected(storage_errc::invalid_argument, "reopen: only done or failed tasks are reopened");
  return move_to_todo(from, [](const task&) { return true; });
}

expected<std::vector<task>> task_journal::select_in(write_txn& w, task_state state,
                                                    const std::function<bool(const task&)>& pred) const {
  std::vector<task> hit;
  auto cur = cursor::open(w.raw(), by_state_[static_cast<int>(state)], env_->dir());
  if (!cur) return cur.err();
  for (auto ok = cur->first();; ok = cur->next()) {
    if (!ok) return ok.err();
    if (!*ok) break;
    auto t = get_in(w, tasks_, from_be64(cur->key()), env_->dir());
    if (!t) return t.err();
    if (pred(*t)) hit.push_back(std::move(*t));
  }
  return hit;
}

expected<std::uint64_t> task_journal::forget_in(write_txn& w,
                                                const std::function<bool(const task&)>& pred) const {
  std::uint64_t forgot = 0;
  // DOING too: a runner that died left its leases, which the master re-queues with their rows; and
  // FAILED: a quarantined task tried again later starts where it failed.
  for (auto state : {task_state::todo, task_state::doing, task_state::failed}) {
    auto hit = select_in(w, state, [&](const task& t) { return t.trained > 0 && pred(t); });
    if (!hit) return hit.err();
    for (auto& t : *hit) {
      t.trained = t.step = 0;
      if (auto s = store(w, dbs_, t, t.state); !s) return s.err();
    }
    forgot += hit->size();
  }
  return forgot;
}

expected<std::uint64_t> task_journal::move_in(write_txn& w, task_state from,
                                              const std::function<bool(const task&)>& pred) const {
  auto hit = select_in(w, from, pred);
  if (!hit) return hit.err();
  std::uint64_t records = 0;
  for (auto& t : *hit) {
    if (from == task_state::done) records += t.count;
    t.state = task_state::todo;
    t.deadline_ms = 0;
    if (from == task_state::failed) t.failures = 0;        // a quarantined task gets its attempts anew
    if (from == task_state::done) t.trained = t.step = 0;  // the model lost all of its rows
    if (auto s = store(w, dbs_, t, from); !s) return s.err();
  }
  // The requeued counter counts leases given back (doing -> todo), not reopened tasks; records_done
  // counts the records of DONE tasks, which a reopened one no longer is (it counts them again when
  // it is done again; before, a resumed job's result counted them twice).
  if (from == task_state::doing)
    if (auto a = add_counter(w, meta_, requeued_key, hit->size()); !a) return a.err();
  if (auto a = lower_counter(w, meta_, records_done_key, records); !a) return a.err();
  return hit->size();
}

expected<std::uint64_t> task_journal::forget_trained() {
  std::uint64_t forgot = 0;
  auto r = write([&](write_txn& w) -> expected<void> {
    auto n = forget_in(w, [](const task&) { return true; });
    if (!n) return n.err();
    forgot = *n;
    return {};
  });
  if (!r) return r.err();
  return forgot;
}

expected<task_journal::reopened_after> task_journal::reopen_after(std::uint64_t step) {
  reopened_after out;
  const auto later = [step](const task& t) { return t.step > step; };
  auto r = write([&](write_txn& w) -> expected<void> {
    auto done = move_in(w, task_state::done, later);  // now todo with no step: not forgotten below
    if (!done) return done.err();
    auto trained = forget_in(w, later);
    if (!trained) return trained.err();
    out = {*done, *trained};
    return {};
  });
  if (!r) return r.err();
  return out;
}

expected<std::uint64_t> task_journal::move_to_todo(task_state from,
                                                   const std::function<bool(const task&)>& pred) {
  std::uint64_t moved = 0;
  auto r = write([&](write_txn& w) -> expected<void> {
    auto n = move_in(w, from, pred);
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
