// The communicator of one GPU worker, keyed by the ring's membership epoch. Each new epoch gets a
// fresh communicator from a fresh unique id (handed out through the master); the previous one is
// aborted, never finalized: a peer of the old ring may be dead, and NCCL requires every rank to
// abort a communicator any rank aborted. Make before break: the old communicator is aborted after
// the new one is up, on a thread of its own, off the path to the first collective (an abort took
// 0.5-1 s on an H100 and an init after it as long, against ~30 ms for an init beside a live one).
// Up to nccl_options::aborts_in_flight aborts run at once, so changes that come quicker than an
// abort (joins one after another) do not wait for the abort of the communicator before last.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <thread>

#include "troupe/gpu/nccl_comm.hpp"

namespace troupe::gpu {

class comm_manager {
 public:
  explicit comm_manager(nccl_options o = {}) : opt_(o) {}
  comm_manager(comm_manager&& o) noexcept;
  comm_manager& operator=(comm_manager&& o) noexcept;
  ~comm_manager();

  // Initialises the communicator of `epoch`, then aborts the previous one (if any) in the
  // background. On failure no communicator is held and the error (timeout, nccl_failed,
  // not_built) is returned.
  expected<nccl_comm*> rebuild(std::uint64_t epoch, const nccl_unique_id& id, int nranks, int rank);
  // The communicator of `epoch` when it is built and healthy, else null.
  nccl_comm* current(std::uint64_t epoch) noexcept;
  // Aborts and drops the current communicator (after a failed collective, or at shutdown), and
  // waits for a background abort still under way.
  void abort() noexcept;
  // Waits for the background aborts under way (what every retired communicator held is released).
  void settle() noexcept;
  // Background aborts not yet finished.
  std::size_t aborts_under_way() const noexcept;

  std::uint64_t epoch() const noexcept { return epoch_; }
  std::uint64_t rebuilds() const noexcept { return rebuilds_; }
  const nccl_options& options() const noexcept { return opt_; }

 private:
  nccl_options opt_;
  void retire(std::unique_ptr<nccl_comm> old);
  // Joins the reapers that have finished, then the oldest ones until fewer than `keep` remain.
  void join_reapers(std::size_t keep) noexcept;

  // A thread aborting a retired communicator; `done` is set as it ends.
  struct reaper {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::unique_ptr<nccl_comm> comm_;
  std::deque<reaper> reapers_;  // oldest first
  std::uint64_t epoch_ = 0;
  std::uint64_t rebuilds_ = 0;
};

}  // namespace troupe::gpu
