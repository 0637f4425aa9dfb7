// The per-epoch choice between NCCL and the host-staged allreduce, from the devices the ranks
// posted (runs everywhere: pure host code).
#include <gtest/gtest.h>

#include <vector>

#include "troupe/gpu/comm_plan.hpp"

namespace troupe::gpu {
namespace {

TEST(comm_plan, one_rank_needs_no_collective) {
  std::vector<rank_device> r{{"worker-0", "h", "GPU-a"}};
  EXPECT_EQ(plan_gradient_sync(r, true).path, sync_path::single);
}

TEST(comm_plan, distinct_gpus_use_nccl) {
  std::vector<rank_device> r{
      {"worker-0", "h1", "GPU-a"}, {"worker-1", "h1", "GPU-b"}, {"worker-2", "h2", "GPU-c"}};
  auto p = plan_gradient_sync(r, true);
  EXPECT_EQ(p.path, sync_path::nccl) << p.reason;
}

TEST(comm_plan, a_shared_gpu_falls_back_to_host_staged_naming_the_ranks) {
  std::vector<rank_device> r{
      {"worker-0", "h", "GPU-a"}, {"worker-1", "h", "GPU-b"}, {"worker-2", "h", "GPU-a"}};
  auto p = plan_gradient_sync(r, true);
  EXPECT_EQ(p.path, sync_path::host_staged);
  EXPECT_NE(p.reason.find("worker-0 and worker-2 share GPU-a"), std::string::npos) << p.reason;
}

TEST(comm_plan, every_worker_on_one_gpu_is_host_staged) {
  std::vector<rank_device> r{{"worker-0", "h", "GPU-a"}, {"worker-1", "h", "GPU-a"}};
  EXPECT_EQ(plan_gradient_sync(r, true).path, sync_path::host_staged);
}

TEST(comm_plan, a_rank_without_device_or_a_missing_id_is_host_staged) {
  std::vector<rank_device> r{{"worker-0", "h", "GPU-a"}, {"worker-1", "h", ""}};
  auto p = plan_gradient_sync(r, true);
  EXPECT_EQ(p.path, sync_path::host_staged);
  EXPECT_NE(p.reason.find("worker-1 has no GPU"), std::string::npos) << p.reason;
  std::vector<rank_device> two{{"worker-0", "h", "GPU-a"}, {"worker-1", "h", "GPU-b"}};
  EXPECT_EQ(plan_gradient_sync(two, false).path, sync_path::host_staged);
  EXPECT_EQ(to_string(sync_path::host_staged), "host-staged");
}

}  // namespace
}  // namespace troupe::gpu
