// The task journal's leases and reports (task_journal.hpp), all of a batch in one write transaction
// (apply: group commit), and the holder index they keep.
#include <algorithm>
#include <set>

#include "task_journal_codec.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::storage {

using namespace journal_detail;

expected<void> task_journal::check_holder(const std::string& holder) const {
  if (holder.size() <= max_holder && holder.find('\0') == std::string::npos) return {};
  return make_unexpected(storage_errc::invalid_argument, env_->dir() + ": lease holder name longer than " +
                                                             std::to_string(max_holder) +
                                                             " bytes or holding a NUL");
}

expected<std::optional<task>> task_journal::lease_in(write_txn& w, const std::string& holder,
                                                     std::int64_t deadline_ms) const {
  if (!indexed_) return unindexed();
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
  if (t->trained == 0) t->order_attempt = t->attempt;  // its own order, until a holder left partway
  if (auto s = store(w, dbs_, *t, task_state::todo); !s) return s.err();
  return std::optional<task>(std::move(*t));
}

// The first `rows` of the task's order, trained by a holder whose steps applied them up to `step`,
// kept: more than were kept before (with their step), else nothing changes (a holder that cannot have
// started past them). Whether they were kept.
static bool keep_rows(task& t, std::uint64_t rows, std::uint64_t step) {
  if (rows <= t.trained) return false;
  t.trained = rows;
  t.step = step;
  return true;
}

expected<std::uint64_t> task_journal::requeue_held(write_txn& w, const std::string& holder,
                                                   const std::vector<std::uint64_t>& keep,
                                                   const std::optional<held_rows>& rows, bool* kept) const {
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
    if (rows && rows->id == id && rows->attempt == t->attempt && rows->trained < t->count &&
        keep_rows(*t, rows->trained, rows->step) && kept)
      *kept = true;
    if (auto s = store(w, dbs_, *t, task_state::doing); !s) return s.err();
    ++moved;
  }
  if (auto a = add_counter(w, meta_, requeued_key, moved); !a) return a.err();
  return moved;
}

expected<task_state> task_journal::report_in(write_txn& w, const report_request& r) const {
  auto t = get_in(w, tasks_, r.id, env_->dir());
  if (!t) return t.err();
  // The same lease's DONE again: its acknowledgement was lost (a connection closed while the master
  // was paused) and the worker sent it again. Acknowledged, counted once (it was refused as "stale",
  // a warning that read as a task trained twice).
  if (!r.failed && !r.left && t->state == task_state::done && t->holder == r.holder &&
      t->attempt == r.attempt)
    return t->state;
  if (r.left) return hand_back_in(w, *t, r);
  if (auto c = check_lease(*t, r.holder, r.attempt); !c) return c.err();
  t->deadline_ms = 0;
  if (r.failed) {
    ++t->failures;
    t->last_error = r.error_text;
    // The rows it trained before the step that failed are in the model: a retry starts at that step
    // (in the same order: order_attempt stays). Never all of them: a failed task is not done.
    keep_rows(*t, std::min(r.trained, t->count - 1), r.step);
    t->state = t->failures >= opts_.max_failures ? task_state::failed : task_state::todo;
  } else {
    t->state = task_state::done;
    t->step = r.step;
    if (auto a = add_counter(w, meta_, records_done_key, t->count); !a) return a.err();
  }
  if (auto s = store(w, dbs_, *t, task_state::doing); !s) return s.err();
  return t->state;
}

expected<task_state> task_journal::hand_back_in(write_txn& w, task t, const report_request& r) const {
  // Its holder's departure re-queued it already (the master heard of the leave first) and nobody
  // leased it since: the rows are kept all the same.
  const bool requeued = t.state == task_state::todo && t.holder == r.holder && t.attempt == r.attempt;
  if (!requeued)
    if (auto c = check_lease(t, r.holder, r.attempt); !c) return c.err();
  const task_state old = t.state;
  t.deadline_ms = 0;
  // Rows of the order it trained in (order_attempt, set by its lease). Fewer than before (a holder
  // that cannot have started past them) change nothing.
  keep_rows(t, std::min(r.trained, t.count), r.step);
  t.state = t.trained == t.count ? task_state::done : task_state::todo;
  if (t.state == task_state::done)
    if (auto a = add_counter(w, meta_, records_done_key, t.count); !a) return a.err();
  if (old == task_state::doing && t.state == task_state::todo)
    if (auto a = add_counter(w, meta_, requeued_key, 1); !a) return a.err();
  if (auto s = store(w, dbs_, t, old); !s) return s.err();
  return t.state;
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
      if (auto c = check_holder(l.holder); !c) return c;
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

expected<std::uint64_t> task_journal::requeue_holder(const std::string& holder,
                                                     const std::optional<held_rows>& rows, bool* kept) {
  std::uint64_t moved = 0;
  auto r = write([&](write_txn& w) -> expected<void> {
    if (kept) *kept = false;  // the function may run again (the map grew)
    auto n = requeue_held(w, holder, {}, rows, kept);
    if (!n) return n.err();
    moved = *n;
    return {};
  });
  if (!r) return r.err();
  return moved;
}

expected<std::vector<std::pair<std::string, std::uint64_t>>> task_journal::requeue_holders_except(
    const std::vector<std::string>& alive) {
  auto doing = list(task_state::doing);
  if (!doing) return doing.err();
  std::set<std::string> gone;
  for (const auto& t : *doing)
    if (std::find(alive.begin(), alive.end(), t.holder) == alive.end()) gone.insert(t.holder);
  std::vector<std::pair<std::string, std::uint64_t>> moved;
  if (gone.empty()) return moved;
  auto r = write([&](write_txn& w) -> expected<void> {
    moved.clear();
    for (const auto& h : gone) {
      auto n = requeue_held(w, h, {});
      if (!n) return n.err();
      if (*n > 0) moved.emplace_back(h, *n);
    }
    return {};
  });
  if (!r) return r.err();
  return moved;
}

}  // namespace troupe::storage
