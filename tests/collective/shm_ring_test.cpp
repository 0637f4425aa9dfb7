#include <gtest/gtest.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <filesystem>
#include <numeric>
#include <thread>
#include <vector>

#include "troupe/transport/shm_ring.hpp"

namespace troupe::transport {
namespace {

std::string unique(const std::string& stem) {
  return "troupe-test-" + stem + "-" + std::to_string(::getpid());
}

TEST(shm_ring, a_ring_made_ahead_is_renamed_populated_and_then_opened) {
  auto ahead = unique("ahead"), name = unique("renamed");
  auto a = shm_ring::create(ahead, 1 << 16);
  ASSERT_TRUE(a) << a.err().to_string();
  // A slice at a time: 64 KiB in 16 KiB slices.
  EXPECT_EQ((*a)->populate_some(16 << 10), std::size_t(48 << 10));
  std::size_t left = 1;
  for (int i = 0; i < 10 && left > 0; ++i) left = (*a)->populate_some(16 << 10).value_or(1);
  EXPECT_EQ(left, 0u);
  ASSERT_TRUE((*a)->rename(name));
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + ahead));
  EXPECT_FALSE((*a)->opened());
  auto b = shm_ring::open(name, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  ASSERT_TRUE(b) << b.err().to_string();
  EXPECT_TRUE((*a)->opened());
  // Opened: no more renaming (the peer knows it by its name).
  EXPECT_FALSE((*a)->rename(ahead));
  std::vector<std::byte> in(40000, std::byte{7}), out(in.size());
  EXPECT_EQ((*b)->write_some(in), in.size());
  EXPECT_EQ((*a)->read_some(out), out.size());
  EXPECT_EQ(in, out);
  (*a)->unlink_when_attached();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
}

// A ring /dev/shm has no room for is refused as it is made, naming /dev/shm, and leaves no name:
// its pages were faulted in at the first writes, a SIGBUS (the worker and its peer killed, again
// at each relaunch) where /dev/shm was full. Twice the filesystem's size: refused at once, nothing
// allocated.
TEST(shm_ring, a_ring_dev_shm_has_no_room_for_is_refused_not_a_sigbus_later) {
  struct statvfs fs {};
  ASSERT_EQ(::statvfs("/dev/shm", &fs), 0);
  const std::size_t size = static_cast<std::size_t>(fs.f_blocks) * fs.f_frsize;
  auto name = unique("huge");
  auto r = shm_ring::create(name, 2 * size, true);
  ASSERT_FALSE(r) << "a ring of " << 2 * size << " bytes";
  EXPECT_NE(r.err().to_string().find("is /dev/shm full?"), std::string::npos) << r.err().to_string();
  EXPECT_NE(r.err().to_string().find("No space left on device"), std::string::npos) << r.err().to_string();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name));
}

TEST(shm_ring, only_the_creator_renames) {
  auto name = unique("notmine");
  auto a = shm_ring::create(name, 4096);
  ASSERT_TRUE(a);
  auto b = shm_ring::open(name, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  ASSERT_TRUE(b);
  auto r = (*b)->rename(unique("stolen"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("only its creator"), std::string::npos) << r.err().to_string();
  EXPECT_EQ((*b)->populate_some(4096), 0u);  // nothing to do on the opener's side
}

TEST(shm_ring, streams_bytes_across_the_wrap_point) {
  auto name = unique("wrap");
  auto a = shm_ring::create(name, 4096);
  ASSERT_TRUE(a) << a.err().to_string();
  auto b = shm_ring::open(name, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  ASSERT_TRUE(b) << b.err().to_string();
  (*a)->unlink_when_attached();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + name)) << "name must be unlinked once attached";
  std::vector<std::byte> in(1 << 20), out(in.size());
  for (size_t i = 0; i < in.size(); ++i) in[i] = std::byte(i * 7 + 3);
  std::thread writer([&] {
    size_t off = 0;
    while (off < in.size()) {
      off += (*a)->write_some(std::span(in).subspan(off, std::min<size_t>(3000, in.size() - off)));
      if (off < in.size()) (*a)->wait_for_space(std::chrono::milliseconds(10));
    }
  });
  size_t got = 0;
  while (got < out.size()) {
    got += (*b)->read_some(std::span(out).subspan(got));
    if (got < out.size()) (*b)->wait_for_data(std::chrono::milliseconds(10));
  }
  writer.join();
  EXPECT_EQ(in, out);
}

// reserve() is the contiguous free space up to the wrap point; commit(n) publishes n bytes of it
// (what the fused allreduce writes its sums into).
TEST(shm_ring, reserve_and_commit_write_in_place_up_to_the_wrap_point) {
  auto name = unique("reserve");
  auto a = shm_ring::create(name, 4096);
  ASSERT_TRUE(a);
  auto b = shm_ring::open(name, std::chrono::steady_clock::now() + std::chrono::seconds(1));
  ASSERT_TRUE(b);
  std::vector<std::byte> skip(3000);
  ASSERT_EQ((*a)->write_some(skip), 3000u);
  ASSERT_EQ((*b)->read_some(skip), 3000u);  // head and tail at 3000: 1096 bytes to the wrap point
  auto first = (*a)->reserve();
  ASSERT_EQ(first.size(), 1096u);
  for (std::size_t i = 0; i < first.size(); ++i) first[i] = std::byte(i & 0xff);
  (*a)->commit(first.size());
  auto second = (*a)->reserve();  // wrapped: the rest of the free space
  ASSERT_EQ(second.size(), 3000u);
  second[0] = std::byte{0x5a};
  (*a)->commit(1);
  EXPECT_EQ((*a)->writable(), 4096u - 1097u);
  std::vector<std::byte> got(1097);
  ASSERT_EQ((*b)->read_some(got), 1097u);
  for (std::size_t i = 0; i < 1096; ++i) ASSERT_EQ(got[i], std::byte(i & 0xff)) << i;
  EXPECT_EQ(got[1096], std::byte{0x5a});
  EXPECT_EQ((*a)->reserve().size(), 4095u) << "all free, up to the wrap point (the head is at 1)";
}

TEST(shm_ring, capacity_bounds_the_writer) {
  auto name = unique("cap");
  auto a = shm_ring::create(name, 5000);
  ASSERT_TRUE(a);
  EXPECT_EQ((*a)->capacity(), 8192u);
  std::vector<std::byte> big(20000);
  EXPECT_EQ((*a)->write_some(big), 8192u);
  EXPECT_EQ((*a)->write_some(big), 0u);
  EXPECT_FALSE((*a)->wait_for_space(std::chrono::milliseconds(1)));
}

TEST(shm_ring, open_times_out_with_named_error) {
  auto r = shm_ring::open(unique("absent"), std::chrono::steady_clock::now() + std::chrono::milliseconds(20));
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == shm_errc::timeout);
  EXPECT_NE(r.err().context().find("absent"), std::string::npos);
}

TEST(shm_ring, create_twice_fails_and_remove_clears) {
  auto name = unique("twice");
  auto a = shm_ring::create(name, 4096);
  ASSERT_TRUE(a);
  auto b = shm_ring::create(name, 4096);
  ASSERT_FALSE(b);
  EXPECT_TRUE(b.err() == shm_errc::system_error);
  shm_ring::remove(name);
  EXPECT_TRUE(shm_ring::create(name, 4096));
}

}  // namespace
}  // namespace troupe::transport
