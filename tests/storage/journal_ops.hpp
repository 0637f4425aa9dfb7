// One lease, report or look-up on a task_journal, as tests and benchmarks ask for them, through
// the journal's public interface: apply() with a batch of one (as the dispenser's batches reach it)
// and list(). Production code has no use for them (the dispenser batches everything it hears
// between two commits), so they live here rather than in the journal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "troupe/storage/errc.hpp"
#include "troupe/storage/task_journal.hpp"

namespace troupe::storage::testing {

// The lease request `r` alone: its holder's DOING tasks not in r.keep back to todo, then the next
// todo task leased to it, in one write transaction.
inline expected<lease_outcome> lease(task_journal& j, const lease_request& r) {
  auto out = j.apply(journal_batch{{}, {r}});
  if (!out) return out.err();
  return std::move(out->leases.front());
}

// Ids of the DOING tasks `holder` holds, by id (from the tasks, not the holder index).
inline expected<std::vector<std::uint64_t>> held_by(const task_journal& j, const std::string& holder) {
  auto doing = j.list(task_state::doing);
  if (!doing) return doing.err();
  std::vector<std::uint64_t> ids;
  for (const auto& t : *doing)
    if (t.holder == holder) ids.push_back(t.id);
  return ids;
}

// The next todo task leased to `holder` until `deadline_ms`, keeping every lease it holds;
// nullopt when todo is empty.
inline expected<std::optional<task>> lease(task_journal& j, const std::string& holder,
                                           std::int64_t deadline_ms) {
  auto keep = held_by(j, holder);
  if (!keep) return keep.err();
  auto out = lease(j, lease_request{holder, deadline_ms, std::move(*keep)});
  if (!out) return out.err();
  return std::move(out->leased);
}

// The requests in order, in one write transaction.
inline expected<std::vector<lease_outcome>> lease_batch(task_journal& j,
                                                        const std::vector<lease_request>& rs) {
  auto out = j.apply(journal_batch{{}, rs});
  if (!out) return out.err();
  return std::move(out->leases);
}

// The report alone; its error (stale_lease, not_found) or the task's new state.
inline expected<task_state> report(task_journal& j, const report_request& r) {
  auto out = j.apply(journal_batch{{r}, {}});
  if (!out) return out.err();
  return std::move(out->reports.front());
}

// doing -> done; stale_lease when (holder, attempt) no longer holds the task.
inline expected<void> complete(task_journal& j, std::uint64_t id, const std::string& holder,
                               std::uint32_t attempt) {
  auto s = report(j, {id, holder, attempt, false, {}});
  if (!s) return s.err();
  return {};
}

// doing -> todo, or -> failed once failures reach max_failures; the new state.
inline expected<task_state> fail(task_journal& j, std::uint64_t id, const std::string& holder,
                                 std::uint32_t attempt, const std::string& error_text) {
  return report(j, {id, holder, attempt, true, error_text});
}

// Task `id` in whichever state it is; not_found when there is none.
inline expected<task> get(const task_journal& j, std::uint64_t id) {
  for (auto s : {task_state::todo, task_state::doing, task_state::done, task_state::failed}) {
    auto tasks = j.list(s);
    if (!tasks) return tasks.err();
    for (auto& t : *tasks)
      if (t.id == id) return std::move(t);
  }
  return make_unexpected(storage_errc::not_found, "task " + std::to_string(id));
}

}  // namespace troupe::storage::testing
