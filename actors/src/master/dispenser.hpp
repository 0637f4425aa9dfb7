// The dispenser's behaviour as a plain class (the actor in dispenser.cpp forwards its mailbox to
// it): hands out task leases from the task journal, takes task reports, and moves the tasks of dead
// holders and expired leases back to TODO. Everything it sends goes through its node_context, and
// every lease deadline and expiry reads the context's clock, so unit tests drive it with a fake
// context and a manual clock.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "node_context.hpp"
#include "roles.hpp"
#include "troupe/observe/timeline.hpp"
#include "troupe/storage/task_journal.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::actors {

class task_dispenser {
 public:
  // Opens (or creates) the journal in <job dir>/journal over the records in data.train_dir, cut
  // into tasks as the job spec says. Throws std::runtime_error when the store or journal cannot be
  // opened (the supervisor restarts the actor).
  task_dispenser(node_context& node, const data_paths& data);

  // A TaskRequest (answered with a TaskLease), a TaskReport (answered with a TaskReportAck) or a
  // TaskRenew (one-way: the sender's leases it still holds run for another lease timeout from now on
  // the context's clock); other kinds are ignored. Throws std::runtime_error when the journal is broken,
  // kj::Exception on a malformed message (the actor catches it).
  void on_message(const message& m);
  // TaskReports and TaskRequests answered together: every report, then every lease (with each
  // requester's requeue of the leases it no longer knows of), in one journal write transaction, so
  // one commit and one fsync for the batch (group commit); the answers go out once it committed.
  // The actor collects the task messages that queued up in its mailbox while the previous batch was
  // committing. A TaskRenew in `batch` is applied on its own; other kinds are ignored.
  void on_messages(const std::vector<message>& batch);
  // The tasks `holder` (node#incarnation) holds go back to TODO (it died or left); the one `rows`
  // names keeps those rows (the master's surviving_rows: the replicas or shards that outlived the holder
  // hold them). That incarnation is gone for good: a lease request it still sends (a leaving worker
  // shutting down) gets none.
  void requeue_holder(const std::string& holder, const std::optional<storage::held_rows>& rows = {});
  // The tasks of every holder not in `alive_holders` go back to TODO (the master's reconciliation).
  void requeue_absent(const std::vector<std::string>& alive_holders);
  // Leases whose deadline passed on the context's clock go back to TODO.
  void requeue_expired();
  // The ring's replicas start again from a checkpoint of their first `step` steps (every replica
  // that had trained died): the DONE tasks applied at a later step back to TODO and the kept rows
  // of a later step forgotten (task_journal::reopen_after), said in the log and the timeline, and in
  // `said` for the job's console (JobStatus.notice; empty when nothing went back).
  struct ring_restart : storage::task_journal::reopened_after {
    std::string said;
  };
  expected<ring_restart> ring_restored(std::uint64_t step);
  // The journal's counts and this dispenser's requeues and data epoch; nullopt when the journal fails.
  std::optional<wire::task_counts> counts() const;
  // A disk fault of the master's own files (empty: over): no task is handed out while it lasts.
  void set_external_fault(const std::string& fault);
  const storage::task_journal& journal() const { return *journal_; }

 private:
  // The reply to `req`: the leased task, none, or finished.
  void reply_lease(const message& req, const std::optional<storage::task>& t, bool none);
  // Adds a report or lease request to `jb`; false when it is answered already (a departed holder)
  // or dropped (malformed).
  bool collect(const message& m, std::int64_t deadline, storage::journal_batch& jb);
  void ack_report(const message& m, const storage::report_request& r,
                  const expected<storage::task_state>& state);
  // `holder` asked for a task while holding `requeued` leases it no longer knows of (back to TODO).
  void lease_not_received(const std::string& holder, std::uint64_t requeued);
  // A report's task is quarantined (true) or done (false): the run of quarantines, and giving up.
  void count_quarantine(bool quarantined);
  void renew_leases(const message& m);
  // Adds a requeue's count to the total; 0 on an error.
  std::uint64_t count_requeued(expected<std::uint64_t> n);
  // A journal write failed: true (and the job pauses) for a disk fault, false for anything else.
  bool disk_trouble(const error& e);
  // A journal write succeeded: a disk fault is over.
  void disk_ok();
  bool paused() const { return !fault_.empty() || !external_fault_.empty(); }

  node_context& node_;
  std::optional<storage::task_journal> journal_;
  std::string fault_, external_fault_;
  // "task <id>: <error>" of the last task quarantined (read from the journal once after a restart).
  mutable std::string last_failure_;
  // Tasks quarantined since a task was last done (this dispenser's reports: a restarted one counts
  // afresh); at job.max_quarantined_in_a_row it gives up (gave_up_ says why): no more leases.
  std::uint32_t quarantined_in_a_row_ = 0;
  std::string gave_up_;
  std::set<std::string> departed_;  // holders requeue_holder() was called for
  // The lease granted to each holder last (task id, attempt): renewed with its renewals.
  std::map<std::string, std::pair<std::uint64_t, std::uint32_t>> last_grant_;
  std::uint32_t data_epoch_ = 0;
  observe::job_timeline timeline_;  // re-queues and quarantines
};

}  // namespace troupe::actors
