// A GPU worker's side of the communicator rendezvous through the master (docs/gpu_workers.md):
// post this rank's device (rank 0: the NCCL unique id too) for a ring epoch, then wait until every
// rank of that ring has posted.
#pragma once

#include <atomic>
#include <chrono>

#include "troupe/core/clock.hpp"
#include "troupe/wire/gpu_comm.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {

struct gpu_exchange_options {
  std::chrono::milliseconds timeout{10'000};  // the whole exchange
  std::chrono::milliseconds poll{20};         // between fetches
  // The deadline's and the pauses' clock (a node's: node_context::clock()).
  troupe::clock* clock = &troupe::clock::system();
  // When set: fail fast (collective_errc::cancelled) once it no longer equals the post's epoch.
  const std::atomic<std::uint64_t>* current_epoch = nullptr;
  // Also wait until rank 0's unique id is known (the ranks chose NCCL).
  bool need_unique_id = false;
};

// Returns the complete snapshot of `mine.ring_epoch` (with the unique id if need_unique_id). Re-posts when
// the master no longer has this rank's post (a restarted master). The master answers every post and
// fetch at once with what it has, so the other ranks' posts are learned by fetching again, `poll`
// apart. Errors: the master's refusal (stale epoch,
// bad post), rpc failures, a timeout naming the ranks still missing, the ring epoch moving on.
expected<wire::gpu_comm_info> gpu_comm_exchange(wire::rpc_channel& rpc, const wire::gpu_comm_post& mine,
                                                const gpu_exchange_options& o);

}  // namespace troupe::actors
