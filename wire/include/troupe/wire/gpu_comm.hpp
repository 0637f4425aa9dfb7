// The GPU communicator rendezvous as the master and its GPU workers speak it (JobMessage
// gpuCommPost / gpuCommFetch / gpuCommInfo, docs/gpu_workers.md): a rank posts its device (rank 0:
// the NCCL unique id too) for a ring epoch; the master answers with what it knows of that epoch.
// The master keeps the posts (actors/src/master/gpu_rendezvous.hpp); a worker posts and waits for
// the whole ring (actors/src/worker/gpu_comm_client.hpp). This header is their only shared part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "troupe/core/error.hpp"
#include "troupe/transport/schema/job.capnp.h"

namespace troupe::wire {

inline constexpr std::size_t gpu_unique_id_bytes = 128;  // sizeof(ncclUniqueId)
inline constexpr std::uint32_t gpu_max_ranks = 4096;
inline constexpr std::size_t gpu_max_text = 256;  // node, host, device uuid

// One rank's device.
struct gpu_rank {
  std::uint32_t rank = 0;
  std::string node, host, device_uuid;
  bool operator==(const gpu_rank&) const = default;
};

// What a rank posts for a ring epoch of `ranks` ranks.
struct gpu_comm_post {
  std::uint64_t ring_epoch = 0;
  std::uint32_t ranks = 0;
  gpu_rank who;
  std::string unique_id;  // rank 0: gpu_unique_id_bytes opaque bytes; empty otherwise
};

// What the master knows of a ring epoch.
struct gpu_comm_info {
  std::uint64_t ring_epoch = 0;
  std::uint32_t ranks = 0;       // 0: nothing posted for the epoch yet
  std::vector<gpu_rank> posted;  // by rank
  std::string unique_id;
  bool complete() const { return ranks != 0 && posted.size() == ranks; }
};

// Readers throw kj::Exception on a malformed message: call them inside `guarded`.
gpu_comm_post read_gpu_post(schema::GpuCommPost::Reader r);
void write_gpu_post(schema::GpuCommPost::Builder b, const gpu_comm_post& p);
// The master's answer: the info, or its error (the refused post's, the stale epoch's).
void write_gpu_info(schema::GpuCommInfo::Builder b, const expected<gpu_comm_info>& s);
// The info, or the master's error (core_errc::io_error with its text).
expected<gpu_comm_info> read_gpu_info(schema::GpuCommInfo::Reader r);

}  // namespace troupe::wire
