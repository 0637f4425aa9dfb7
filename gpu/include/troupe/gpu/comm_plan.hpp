// How the ranks of one ring epoch sum their gradients, decided from the devices they posted
// through the master (every rank decides from the same posts, so they agree): NCCL on the devices
// when every rank has a GPU of its own, otherwise host-staged over the CPU ring (NCCL refuses two
// ranks of one communicator on one GPU). Pure host code: built and tested everywhere.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace troupe::gpu {

struct rank_device {
  std::string node;         // worker-3
  std::string host;         // where the process runs
  std::string device_uuid;  // empty: no device
};

enum class sync_path {
  single,       // a ring of one: nothing to sum
  nccl,         // allreduce on the devices through an NCCL communicator
  host_staged,  // download, CPU ring allreduce, upload
};
std::string_view to_string(sync_path p);

struct comm_plan {
  sync_path path = sync_path::single;
  std::string reason;  // why, for the log ("worker-0 and worker-2 share GPU-1a2b...")
};

// `ranks` in ring order. `have_unique_id`: rank 0 posted an NCCL unique id for the epoch.
comm_plan plan_gradient_sync(std::span<const rank_device> ranks, bool have_unique_id);

}  // namespace troupe::gpu
