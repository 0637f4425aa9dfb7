// The rows of each worker's task that would outlive the worker (WorkerProgress.task, sent with its
// progress every progress_every_ms), and each worker's replica step (WorkerProgress.replicaStep), so
// that a worker that dies without a word (SIGKILL, a crash, a fence) costs its task only the rows
// no surviving model holds: its task goes back to TODO keeping the rest (docs/job.md, "A killed
// worker's task"). Before, the task went back whole, and the rows the ring's other replicas or the
// PS shards had already applied were trained again.
//
// Rows the PS shards acknowledged (async_ps) are held whatever happens to the worker: the latest
// report's are kept. A ring's rows are in another worker's replica once that worker's replica step
// reached the step that applied them (the replicas apply the same steps). The survivors' reports
// lag their steps by up to a progress interval, so the decision waits (`wait`, two intervals at
// most) for a survivor's report that covers the dead worker's latest rows; past the wait it keeps
// the latest rows a survivor's report covers, of the few kept per worker. Not thread-safe: the
// master's actor owns it.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/storage/task_journal.hpp"
#include "troupe/transport/schema/job.capnp.h"

namespace troupe::actors {

class surviving_rows {
 public:
  static constexpr std::size_t kept_reports = 8;

  struct rows {
    storage::held_rows held;
    bool on_shards = false;  // acknowledged by the PS shards: held whatever the ring does
  };
  // What a dead holder's task keeps (nullopt: it goes back whole).
  struct decision {
    std::string holder;
    std::optional<storage::held_rows> rows;
  };

  // A progress report of `holder` (node#incarnation): the rows of its task that outlive it (none:
  // it trains none, or its strategy cannot say), and its replica's step (0: not known).
  void note(const std::string& holder, const std::optional<rows>& r, std::uint64_t replica_step);
  // note() of a WorkerProgress's `task` and `replicaStep`.
  void note(const std::string& holder, schema::WorkerProgress::Reader p);
  // `holder` is gone (it is forgotten): its decision now, or none yet when an alive worker's replica
  // will hold its latest rows but no report of it says so yet; settle() decides that one.
  std::optional<decision> gone(const std::string& holder, troupe::clock::time_point now,
                               troupe::clock::duration wait);
  // The deferred decisions that a survivor's report settled since, or whose wait is over.
  std::vector<decision> settle(troupe::clock::time_point now);
  // The ring's replicas start again from a checkpoint of their first `step` steps (every replica
  // that had trained is gone): the later steps are in no model. Each deferred decision is taken now,
  // with the latest rows at or before `step`; no worker's rows or replica step past it count any more
  // (the new ring's steps count again from `step`).
  std::vector<decision> restored(std::uint64_t step);
  // The holders whose decision is deferred: their leases are not anybody's to re-queue meanwhile.
  std::vector<std::string> deferred() const;

 private:
  struct worker {
    std::deque<rows> recent;  // oldest first; at most kept_reports, of one lease
    std::uint64_t replica_step = 0;
  };
  struct waiting {
    worker w;
    troupe::clock::time_point until;
  };
  std::uint64_t furthest_step() const;  // of the workers alive
  // The latest of `w`'s rows that a model outliving it holds, the alive workers' furthest replica
  // step being `others` (nullopt: none).
  static std::optional<storage::held_rows> held(const worker& w, std::uint64_t others);
  std::map<std::string, worker> by_holder_;
  std::map<std::string, waiting> deferred_;
};

}  // namespace troupe::actors
