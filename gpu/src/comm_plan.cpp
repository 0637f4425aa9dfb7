#include "troupe/gpu/comm_plan.hpp"

#include <map>

namespace troupe::gpu {

std::string_view to_string(sync_path p) {
  switch (p) {
    case sync_path::single:
      return "single";
    case sync_path::nccl:
      return "nccl";
    case sync_path::host_staged:
      return "host-staged";
  }
  return "?";
}

comm_plan plan_gradient_sync(std::span<const rank_device> ranks, bool have_unique_id) {
  if (ranks.size() <= 1) return {sync_path::single, "a ring of one worker"};
  // A device is named by its uuid alone: uuids are unique across hosts.
  std::map<std::string, const rank_device*> owner;
  for (const auto& r : ranks) {
    if (r.device_uuid.empty()) return {sync_path::host_staged, r.node + " has no GPU"};
    auto [it, fresh] = owner.emplace(r.device_uuid, &r);
    if (!fresh)
      return {sync_path::host_staged, it->second->node + " and " + r.node + " share " + r.device_uuid +
                                          " (NCCL needs one GPU per rank)"};
  }
  if (!have_unique_id) return {sync_path::host_staged, "rank 0 posted no NCCL unique id"};
  return {sync_path::nccl, "every rank has its own GPU (" + std::to_string(ranks.size()) + " GPUs)"};
}

}  // namespace troupe::gpu
