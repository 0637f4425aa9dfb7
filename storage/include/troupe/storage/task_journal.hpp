// The task journal: a dataset cut into tasks (first record, count, epoch) and each task's state,
// persisted in LMDB so a restarted master resumes exactly (docs/storage_format.md, "journal").
//
// States: todo -> doing (a lease) -> done (a report) | todo (a failure report, a requeue) | failed
// (quarantined after max_failures failure reports, keeping the last error). apply() runs a batch of
// reports and leases (each lease with the requeue of its holder's forgotten leases) in one LMDB
// write transaction (one commit, one fsync: group commit); renew() and the requeue_* calls are one
// each. The DOING tasks are indexed by holder (journal db "by_holder", built at open for a journal
// that predates it), so requeueing a holder's leases reads that holder's tasks only. A lease is
// identified by (task id, holder, attempt); attempt counts leases of the task, so a report from a
// holder whose lease was requeued and handed to someone else is rejected with stale_lease.
//
// Epoch order: a lease always hands out the lowest task id in todo. Ids run epoch by epoch in
// each epoch's shuffled order, so epoch e+1 starts as soon as epoch e has nothing left in todo
// (its last tasks may still be in doing), as ElasticDL does; a task of epoch e that is requeued
// goes out again before any task of epoch e+1.
//
// Thread-safe: reads use their own transactions, writes go through the environment's writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "troupe/storage/lmdb.hpp"

namespace troupe::storage {

enum class task_state : std::uint8_t { todo = 0, doing = 1, done = 2, failed = 3 };
const char* to_string(task_state s);

struct task {
  std::uint64_t id = 0;
  std::uint32_t epoch = 0;
  std::uint64_t first = 0;  // first record index
  std::uint64_t count = 0;  // records in the task
  task_state state = task_state::todo;
  std::uint32_t attempt = 0;     // leases so far; the current lease's token
  std::uint32_t failures = 0;    // fail() calls so far
  std::string holder;            // current (doing) or last holder
  std::int64_t deadline_ms = 0;  // lease deadline, wall-clock ms (doing only)
  std::string last_error;
  // The attempt whose order the task's rows train in (worker_batches: shuffled by id and attempt):
  // each lease's own, set as it is granted, until a holder left or failed partway (trained > 0).
  // `trained`: the rows of that order a holder that left trained before it went, or a holder whose
  // step failed trained before that step (their steps are in the ring's replicas or the PS shards);
  // the next holder trains the order from there, so no row is trained twice across a stop, a
  // preemption, a scale-down or a failure (the retry starts at the step that failed).
  std::uint32_t order_attempt = 0;
  std::uint64_t trained = 0;
  // The replica step that applied the task's last rows (a DONE task's, or the rows kept by
  // `trained`) under a strategy whose ring checkpoints hold every step up to theirs (allreduce): a
  // resumed job whose latest checkpoint is of an earlier step trains them again (reopen_after).
  // 0: not known (another strategy, a report from an older worker).
  std::uint64_t step = 0;
};

struct journal_options {
  std::string dataset;  // the dataset's id (e.g. its directory)
  std::uint64_t record_count = 0;
  std::uint64_t records_per_task = 0;
  std::uint32_t epochs = 1;
  std::uint64_t shuffle_seed = 0;
  bool shuffle = true;
  std::uint32_t max_failures = 3;  // fail() calls before a task is quarantined
};

// The first option a journal holds that differs between the options it was made with (`made`) and
// `now`, by its field's name ("epochs") with both values as text; nullopt when none does
// (max_failures may change).
struct journal_option_difference {
  std::string field, made, now;
};
std::optional<journal_option_difference> journal_difference(const journal_options& made,
                                                            const journal_options& now);

struct task_counts {
  std::uint64_t todo = 0, doing = 0, done = 0, failed = 0;
  // Durable counters, committed with the transitions they count: leases moved back to todo by the
  // requeue_* calls, and the records of tasks completed.
  std::uint64_t requeued = 0, records_done = 0;
  std::uint64_t total() const { return todo + doing + done + failed; }
};

// One lease request: `holder` asks for the next todo task until `deadline_ms`; its DOING tasks not
// in `keep` (the ones it still knows of) go back to todo first, in the same transaction.
struct lease_request {
  std::string holder;
  std::int64_t deadline_ms = 0;
  std::vector<std::uint64_t> keep;
};

struct lease_outcome {
  std::optional<task> leased;  // nullopt: todo was empty
  std::uint64_t requeued = 0;  // the holder's leases moved back to todo (not in keep)
};

// One task report: done, or failed with `error_text` (re-queued, or quarantined at max_failures
// reports of failure) having trained the first `trained` rows of the task's order before the step
// that failed (kept: task::trained; never all of them), or (left) handed back by a holder that
// leaves having trained the first `trained` rows: back to todo with them kept (with `error_text`:
// given back by a holder that goes on, saying why; the journal keeps no text for it).
struct report_request {
  std::uint64_t id = 0;
  std::string holder;
  std::uint32_t attempt = 0;
  bool failed = false;
  std::string error_text;
  bool left = false;
  std::uint64_t trained = 0;
  std::uint64_t step = 0;  // task::step of the rows done or kept; 0: not known
};

// The first `trained` rows of a leased task's order, applied at `step` by a model that outlived its
// holder (the ring's other replicas, the PS shards): kept when that holder's leases are re-queued.
struct held_rows {
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;
  std::uint64_t trained = 0;
  std::uint64_t step = 0;  // task::step; 0: not known
};

// What a dispenser collected while its last commit was on its way: reports first, then leases.
struct journal_batch {
  std::vector<report_request> reports;
  std::vector<lease_request> leases;
};

struct batch_outcome {
  // Per report: the task's new state (done, todo, failed), or stale_lease / not_found (nothing
  // changed for that report; the others are applied).
  std::vector<expected<task_state>> reports;
  std::vector<lease_outcome> leases;
};

class task_journal {
 public:
  // Creates the journal in `dir` (all epochs' tasks, in one transaction) or reopens it. Reopening
  // with different options fails (invalid_argument) naming the option that differs.
  static expected<task_journal> open_or_create(const std::string& dir, const journal_options& opts);
  // Reopens an existing journal (not_found when there is none) without writing to it: a journal
  // that predates the holder index refuses leases and requeue_holder until open_or_create builds it.
  static expected<task_journal> open(const std::string& dir);

  const journal_options& options() const { return opts_; }
  std::uint64_t tasks_per_epoch() const { return per_epoch_; }

  // The reports, then the leases, in order, in one write transaction (group commit). A report
  // (check of its lease first): doing -> done, or (failed) -> todo, or -> failed once the task's
  // failures reach max_failures (either way with the rows it trained before it failed kept), or (left) ->
  // todo with its trained rows kept (counted as a requeue; a lease the holder's departure re-queued already,
  // not leased again since, takes them too; all of its rows trained: done). A lease: the holder's DOING tasks
  // not in `keep` back to todo, then the lowest todo task leased to it until its deadline (nullopt when todo
  // is empty). Fails as a whole for a journal or disk error, and for a holder name the index cannot key
  // (invalid_argument); a refused report (stale_lease, not_found) is an error in its own slot.
  expected<batch_outcome> apply(const journal_batch& b);
  // Moves the deadline of a lease that is still held.
  expected<void> renew(std::uint64_t id, const std::string& holder, std::uint32_t attempt,
                       std::int64_t deadline_ms);
  // doing -> todo for every lease of `holder` (it died or left); returns how many. A lease `rows`
  // names (same task and attempt) keeps those rows (fewer than all; more than it had); `*kept` says
  // whether one did.
  expected<std::uint64_t> requeue_holder(const std::string& holder, const std::optional<held_rows>& rows = {},
                                         bool* kept = nullptr);
  // doing -> todo for every lease whose holder is not in `alive` (holders no longer members, or
  // every holder once a job has ended), in one write; returns each such holder with how many of its
  // tasks moved (holders with none left out).
  expected<std::vector<std::pair<std::string, std::uint64_t>>> requeue_holders_except(
      const std::vector<std::string>& alive);
  // doing -> todo for every lease with deadline_ms <= now_ms; returns how many.
  expected<std::uint64_t> requeue_expired(std::int64_t now_ms);
  // done -> todo, or failed -> todo with its failures reset, for every task in `from` (a resumed
  // job: trained again on a model that lost them, its trained rows with them; or retried after the
  // user fixed the cause); returns how many. Other states: invalid_argument.
  expected<std::uint64_t> reopen(task_state from);
  // Every todo, doing or failed task's trained rows (task::trained) are forgotten: the model that
  // held them is lost (a resumed ring job without a checkpoint); returns how many tasks had some.
  expected<std::uint64_t> forget_trained();
  // What a resumed ring job whose latest checkpoint holds the replica's steps up to `step` lost:
  // every DONE task whose rows were applied at a later step back to todo (its trained rows
  // forgotten), and the kept rows (task::trained) of any other task applied at a later step
  // forgotten. Tasks of an unknown step (0) are left as they are. In one write.
  struct reopened_after {
    std::uint64_t done = 0, trained = 0;
  };
  expected<reopened_after> reopen_after(std::uint64_t step);

  expected<task_counts> counts() const;
  // Tasks in `state`, by id (e.g. doing with their leases, after a restart).
  expected<std::vector<task>> list(task_state state) const;
  // Write transactions this journal object has run (each is one commit of its own unless the
  // environment's writer folds concurrent ones together): what the lease-path tests count.
  std::uint64_t write_transactions() const { return writes_ ? writes_->load() : 0; }

 private:
  task_journal() = default;
  expected<void> load_dbs(bool create);
  expected<void> create_tasks(write_txn& w) const;
  expected<void> check_lease(const task& t, const std::string& holder, std::uint32_t attempt) const;
  // A holder name the index can key (at most max_holder bytes, no NUL): invalid_argument if not.
  expected<void> check_holder(const std::string& holder) const;
  expected<std::uint64_t> requeue_if(const std::function<bool(const task&)>& pred);
  expected<std::uint64_t> move_to_todo(task_state from, const std::function<bool(const task&)>& pred);
  // In `w`: the tasks in `from` for which `pred` holds back to todo (a quarantined one with its
  // failures reset, a done one with its trained rows forgotten; leases given back counted as
  // requeues); returns how many.
  expected<std::uint64_t> move_in(write_txn& w, task_state from,
                                  const std::function<bool(const task&)>& pred) const;
  // In `w`: the trained rows (and their step) of every todo, doing or failed task that has some and
  // for which `pred` holds forgotten; returns how many tasks.
  expected<std::uint64_t> forget_in(write_txn& w, const std::function<bool(const task&)>& pred) const;
  // In `w`: the tasks in `state` for which `pred` holds, by id.
  expected<std::vector<task>> select_in(write_txn& w, task_state state,
                                        const std::function<bool(const task&)>& pred) const;
  // In `w`: the holder's DOING tasks not in `keep` back to todo (counted), the one `rows` names with
  // those rows kept (`*kept` set); returns how many.
  expected<std::uint64_t> requeue_held(write_txn& w, const std::string& holder,
                                       const std::vector<std::uint64_t>& keep,
                                       const std::optional<held_rows>& rows = {}, bool* kept = nullptr) const;
  // In `w`: the lowest todo task leased to `holder`; nullopt when todo is empty.
  expected<std::optional<task>> lease_in(write_txn& w, const std::string& holder,
                                         std::int64_t deadline_ms) const;
  // Builds the holder index from the DOING tasks when the journal has none yet.
  expected<void> ensure_holder_index();
  expected<void> write(const write_fn& fn);
  // In `w`: the report applied (check_lease first); the task's new state.
  expected<task_state> report_in(write_txn& w, const report_request& r) const;
  // In `w`: a holder's hand-back (report_request::left) of `t`; the task's new state.
  expected<task_state> hand_back_in(write_txn& w, task t, const report_request& r) const;
  error unindexed() const;

  std::shared_ptr<lmdb_env> env_;
  dbi tasks_ = 0, meta_ = 0, by_state_[4] = {0, 0, 0, 0}, by_holder_ = 0;
  bool indexed_ = false;             // the holder index covers every DOING task
  dbi dbs_[6] = {0, 0, 0, 0, 0, 0};  // tasks, by_state[0..3], by_holder (for store())
  std::shared_ptr<std::atomic<std::uint64_t>> writes_ = std::make_shared<std::atomic<std::uint64_t>>(0);
  journal_options opts_;
  std::uint64_t per_epoch_ = 0;
};

}  // namespace troupe::storage
