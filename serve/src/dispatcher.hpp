// The front end's replicas and the batches in flight on them. Pure bookkeeping: nothing here sends
// or blocks; the core calls it under its lock and does the I/O.
//
// Contract:
// - A replica is named by its node name ("replica-<generation>-<slot>") and incarnation; it is
//   `loading` from its launch until its ReplicaReady, then `ready`; a swap turns the previous
//   generation's ready replicas `draining` (no new batches), and a draining replica with nothing in
//   flight is handed out once by drained() to be stopped.
// - pick() gives a ready replica of the generation asked with fewer than `pipeline` batches in
//   flight, the least loaded (ties go round the replicas in turn), or null.
// - Every batch is in flight on exactly one replica until finish() (answered), remove() (its
//   replica is gone: the batches come back to be sent again) or overdue() (unanswered past the
//   replica timeout). A batch id is never reused, so a late answer to a batch that was sent again
//   elsewhere finds nothing and is dropped: a request is answered once, by one version.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "request.hpp"

namespace troupe::serve {

enum class replica_phase { loading, ready, draining, stopping };
const char* to_string(replica_phase p);

struct replica_info {
  std::string node;
  std::uint64_t incarnation = 0;
  std::uint32_t generation = 0;
  std::size_t slot = 0;
  replica_phase phase = replica_phase::loading;
  std::size_t inflight = 0;
  std::string version, placement;
  int pid = 0;
};

struct batch {
  std::uint64_t id = 0;
  std::string node;
  std::uint64_t incarnation = 0;
  std::uint32_t generation = 0;
  std::vector<request_ptr> requests;
  std::size_t rows = 0;
  clock::time_point sent{};
};

class dispatcher {
 public:
  dispatcher(std::size_t pipeline, clock::duration replica_timeout)
      : pipeline_(pipeline), timeout_(replica_timeout) {}

  // A launched replica, loading. Replaces an older incarnation of the same name.
  void add(const std::string& node, std::uint64_t incarnation, std::uint32_t generation, std::size_t slot);
  // Its ReplicaReady; false when no such replica (incarnation) is known.
  bool set_ready(const std::string& node, std::uint64_t incarnation, const std::string& version,
                 const std::string& placement, int pid);
  const replica_info* find(const std::string& node) const;
  const replica_info* pick(std::uint32_t generation);
  // Records `requests` as a batch in flight on `node` (which pick() gave).
  const batch& start(const std::string& node, std::vector<request_ptr> requests, clock::time_point now);
  std::optional<batch> finish(std::uint64_t batch_id);
  // Forgets the replica (when `incarnation` is its current one, or any with nullopt) and returns
  // the batches it held.
  std::vector<batch> remove(const std::string& node, std::optional<std::uint64_t> incarnation = std::nullopt);
  // Batches sent before now - replica_timeout, removed from flight (their replicas keep the count
  // until removed: a hung replica takes no more).
  std::vector<batch> overdue(clock::time_point now);
  // The earliest time a batch in flight becomes overdue.
  std::optional<clock::time_point> next_overdue() const;
  void drain(std::uint32_t generation);
  // Every batch in flight, removed (the server stops).
  std::vector<batch> abandon();
  std::vector<std::string> drained();

  std::size_t count(std::uint32_t generation, replica_phase phase) const;
  std::size_t inflight_batches() const { return flight_.size(); }
  const std::map<std::string, replica_info>& replicas() const { return replicas_; }

 private:
  std::size_t pipeline_;
  clock::duration timeout_;
  std::map<std::string, replica_info> replicas_;
  std::map<std::uint64_t, batch> flight_;
  std::uint64_t next_batch_ = 1;
  std::size_t turn_ = 0;
};

}  // namespace troupe::serve
