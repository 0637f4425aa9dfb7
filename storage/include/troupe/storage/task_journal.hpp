// The task journal: a dataset cut into tasks (first record, count, epoch) and each task's state,
// persisted in LMDB so a restarted master resumes exactly (docs/storage_format.md, "journal").
//
// States: todo -> doing (lease) -> done (complete) | todo (fail, requeue) | failed (quarantined
// after max_failures fail() calls, keeping the last error). Every transition is one LMDB write
// transaction. A lease is identified by (task id, holder, attempt); attempt counts leases of the
// task, so a completion or failure from a holder whose lease was requeued and handed to someone
// else is rejected with stale_lease.
//
// Epoch order: lease() always hands out the lowest task id in todo. Ids run epoch by epoch in
// each epoch's shuffled order, so epoch e+1 starts as soon as epoch e has nothing left in todo
// (its last tasks may still be in doing), as ElasticDL does; a task of epoch e that is requeued
// goes out again before any task of epoch e+1.
//
// Thread-safe: reads use their own transactions, writes go through the environment's writer.
#pragma once

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

struct task_counts {
  std::uint64_t todo = 0, doing = 0, done = 0, failed = 0;
  // Durable counters, committed with the transitions they count: leases moved back to todo by the
  // requeue_* calls, and the records of tasks completed.
  std::uint64_t requeued = 0, records_done = 0;
  std::uint64_t total() const { return todo + doing + done + failed; }
};

class task_journal {
 public:
  // Creates the journal in `dir` (all epochs' tasks, in one transaction) or reopens it. Reopening
  // with different options fails (invalid_argument) naming the option that differs.
  static expected<task_journal> open_or_create(const std::string& dir, const journal_options& opts);
  // Reopens an existing journal (not_found when there is none).
  static expected<task_journal> open(const std::string& dir);

  const journal_options& options() const { return opts_; }
  std::uint64_t tasks_per_epoch() const { return per_epoch_; }

  // Leases the next todo task to `holder` until `deadline_ms`; nullopt when todo is empty.
  expected<std::optional<task>> lease(const std::string& holder, std::int64_t deadline_ms);
  // Moves the deadline of a lease that is still held.
  expected<void> renew(std::uint64_t id, const std::string& holder, std::uint32_t attempt,
                       std::int64_t deadline_ms);
  // doing -> done. stale_lease when (holder, attempt) no longer holds the task.
  expected<void> complete(std::uint64_t id, const std::string& holder, std::uint32_t attempt);
  // doing -> todo, or -> failed once failures reach max_failures; returns the new state.
  expected<task_state> fail(std::uint64_t id, const std::string& holder, std::uint32_t attempt,
                            const std::string& error_text);
  // doing -> todo for every lease of `holder` (it died or left); returns how many.
  expected<std::uint64_t> requeue_holder(const std::string& holder);
  // doing -> todo for every lease of `holder` except the tasks in `keep` (those it still holds).
  expected<std::uint64_t> requeue_holder_except(const std::string& holder,
                                                const std::vector<std::uint64_t>& keep);
  // doing -> todo for every lease with deadline_ms <= now_ms; returns how many.
  expected<std::uint64_t> requeue_expired(std::int64_t now_ms);

  expected<task> get(std::uint64_t id) const;
  expected<task_counts> counts() const;
  // Tasks in `state`, by id (e.g. doing with their leases, after a restart).
  expected<std::vector<task>> list(task_state state) const;

 private:
  task_journal() = default;
  expected<void> load_dbs(bool create);
  expected<void> create_tasks(write_txn& w) const;
  expected<void> check_lease(const task& t, const std::string& holder, std::uint32_t attempt) const;
  expected<std::uint64_t> requeue_if(const std::function<bool(const task&)>& pred);

  std::shared_ptr<lmdb_env> env_;
  dbi tasks_ = 0, meta_ = 0, by_state_[4] = {0, 0, 0, 0};
  journal_options opts_;
  std::uint64_t per_epoch_ = 0;
};

}  // namespace troupe::storage
