// The master's store for the GPU communicator rendezvous (troupe/wire/gpu_comm.hpp,
// docs/gpu_workers.md): per ring epoch, each rank's device and rank 0's NCCL unique id. Only the
// current ring epoch and newer are kept; the first unique id posted for an epoch is the one every
// rank gets (a restarted rank-0 actor adopts it instead of posting its own). Pure state: the
// master actor calls it from its handler, the tests call it directly.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/wire/gpu_comm.hpp"

namespace troupe::actors {

class gpu_rendezvous {
 public:
  static constexpr std::size_t max_epochs = 4;  // kept at once (newer than the floor)

  // Records (or replaces) a rank's post. Errors (core_errc::invalid_argument / out_of_range) name
  // the problem: a stale epoch, a rank outside the ring, a ring size other than earlier posts', a
  // unique id of the wrong size or from a rank other than 0, an overlong field.
  expected<wire::gpu_comm_info> add(const wire::gpu_comm_post& p);
  // What is known of `ring_epoch` (empty info when nothing); a stale epoch is an error.
  expected<wire::gpu_comm_info> get(std::uint64_t ring_epoch) const;
  // The ring changed: forget every epoch before `ring_epoch`, refuse posts for them from now on.
  void forget_before(std::uint64_t ring_epoch);
  std::size_t epochs_kept() const { return epochs_.size(); }

 private:
  struct entry {
    std::uint32_t ranks = 0;
    std::map<std::uint32_t, wire::gpu_rank> posted;
    std::string unique_id;
  };
  expected<void> check_fresh(std::uint64_t ring_epoch) const;
  static wire::gpu_comm_info to_info(std::uint64_t epoch, const entry& e);
  std::uint64_t floor_ = 0;
  std::map<std::uint64_t, entry> epochs_;
};

}  // namespace troupe::actors
