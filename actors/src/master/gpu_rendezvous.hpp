// The master's store for the GPU communicator rendezvous (JobMessage gpuCommPost/gpuCommFetch,
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
#include "troupe/transport/schema/job.capnp.h"

namespace troupe::actors {

class gpu_rendezvous {
 public:
  static constexpr std::size_t unique_id_bytes = 128;  // sizeof(ncclUniqueId)
  static constexpr std::uint32_t max_ranks = 4096;
  static constexpr std::size_t max_text = 256;  // node, host, device uuid
  static constexpr std::size_t max_epochs = 4;  // kept at once (newer than the floor)

  struct rank_post {
    std::uint32_t rank = 0;
    std::string node, host, device_uuid;
    bool operator==(const rank_post&) const = default;
  };
  struct post {
    std::uint64_t ring_epoch = 0;
    std::uint32_t ranks = 0;
    rank_post who;
    std::string unique_id;  // rank 0: 128 opaque bytes; empty otherwise
  };
  struct snapshot {
    std::uint64_t ring_epoch = 0;
    std::uint32_t ranks = 0;        // 0: nothing posted for the epoch yet
    std::vector<rank_post> posted;  // by rank
    std::string unique_id;
    bool complete() const { return ranks != 0 && posted.size() == ranks; }
  };

  // Records (or replaces) a rank's post. Errors (core_errc::invalid_argument / out_of_range) name
  // the problem: a stale epoch, a rank outside the ring, a ring size other than earlier posts', a
  // unique id of the wrong size or from a rank other than 0, an overlong field.
  expected<snapshot> add(const post& p);
  // What is known of `ring_epoch` (empty snapshot when nothing); a stale epoch is an error.
  expected<snapshot> get(std::uint64_t ring_epoch) const;
  // The ring changed: forget every epoch before `ring_epoch`, refuse posts for them from now on.
  void forget_before(std::uint64_t ring_epoch);
  std::size_t epochs_kept() const { return epochs_.size(); }

 private:
  struct entry {
    std::uint32_t ranks = 0;
    std::map<std::uint32_t, rank_post> posted;
    std::string unique_id;
  };
  expected<void> check_fresh(std::uint64_t ring_epoch) const;
  static snapshot to_snapshot(std::uint64_t epoch, const entry& e);
  std::uint64_t floor_ = 0;
  std::map<std::uint64_t, entry> epochs_;
};

// Wire forms (JobMessage.gpuCommPost / gpuCommInfo). Readers throw kj::Exception on a malformed
// message: call them inside `guarded`.
gpu_rendezvous::post read_gpu_post(schema::GpuCommPost::Reader r);
void write_gpu_post(schema::GpuCommPost::Builder b, const gpu_rendezvous::post& p);
void write_gpu_info(schema::GpuCommInfo::Builder b, const expected<gpu_rendezvous::snapshot>& s);
// The snapshot, or the master's error (core_errc::io_error with its text).
expected<gpu_rendezvous::snapshot> read_gpu_info(schema::GpuCommInfo::Reader r);

}  // namespace troupe::actors
