#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test_util.hpp"
#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/resources.hpp"

namespace troupe::cluster {
namespace {

TEST(cluster_resources, arithmetic_and_fit) {
  resources cap{4, 8ull << 30, 1};
  resources need{1.5, 2ull << 30, 0};
  EXPECT_TRUE(need.fits_in(cap));
  EXPECT_TRUE((need + need).fits_in(cap));
  EXPECT_FALSE((need + need + need).fits_in(cap));
  EXPECT_TRUE((resources{0.1, 0, 0} + resources{0.2, 0, 0}).fits_in(resources{0.3, 0, 0}));
  EXPECT_FALSE((resources{0, 0, 2}).fits_in(cap));
  resources r = need - cap;  // clamped at zero
  EXPECT_EQ(r, resources{});
  EXPECT_EQ(need.to_string(), "1.5 cpus, 2.0 GiB memory, 0 gpus");
}

TEST(cluster_resources, meminfo_parsing) {
  auto ok = parse_meminfo_total("MemFree:  10 kB\nMemTotal:       16314880 kB\n", "meminfo");
  ASSERT_TRUE(ok);
  EXPECT_EQ(*ok, 16314880ull * 1024);
  auto none = parse_meminfo_total("MemFree: 10 kB\n", "meminfo");
  ASSERT_FALSE(none);
  EXPECT_EQ(none.err(), cluster_errc::corrupt_file);
  EXPECT_NE(none.err().to_string().find("meminfo: no MemTotal line"), std::string::npos);
  auto junk = parse_meminfo_total("MemTotal: lots kB\n", "meminfo");
  ASSERT_FALSE(junk);
  EXPECT_NE(junk.err().to_string().find("MemTotal: lots kB"), std::string::npos);
  EXPECT_FALSE(parse_meminfo_total("MemTotal: 12 MB\n", "meminfo"));
}

TEST(cluster_resources, nvidia_devices_are_counted_by_name) {
  testing::temp_dir dev;
  for (const char* name : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "null"})
    std::ofstream(dev / name);
  EXPECT_EQ(count_nvidia_devices(dev.str()), 2);
  EXPECT_EQ(count_nvidia_devices(dev / "missing"), 0);
}

TEST(cluster_resources, local_capacity_sees_this_machine) {
  auto cap = local_capacity();
  ASSERT_TRUE(cap) << cap.err().to_string();
  EXPECT_GE(cap->cpus, 1);
  EXPECT_GT(cap->memory_bytes, 64ull << 20);
  EXPECT_EQ(cap->gpus, count_nvidia_devices());
}

}  // namespace
}  // namespace troupe::cluster
