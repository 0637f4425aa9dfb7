// NCCL communicators: unique ids (everywhere), and on a GPU the churn of size-1 communicators
// across membership epochs (one GPU cannot hold two ranks of one communicator; the multi-rank path
// runs where several GPUs exist).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "gpu_skip.hpp"
#include "troupe/gpu/comm_manager.hpp"
#include "troupe/gpu/nccl_comm.hpp"

namespace troupe::gpu {
namespace {

TEST(nccl_unique_id, round_trips_its_128_bytes) {
  std::string raw(nccl_unique_id::size, '\0');
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 7 + 3);
  auto id = nccl_unique_id::from_bytes(raw);
  ASSERT_TRUE(id) << id.err().to_string();
  EXPECT_EQ(id->to_bytes(), raw);
}

TEST(nccl_unique_id, refuses_a_wrong_length_naming_it) {
  auto id = nccl_unique_id::from_bytes(std::string(17, 'x'));
  ASSERT_FALSE(id);
  EXPECT_NE(id.err().to_string().find("17 bytes"), std::string::npos) << id.err().to_string();
}

TEST(nccl_comm, without_cuda_or_device_init_fails_with_a_reason) {
  if (device_count()) GTEST_SKIP() << "a GPU is present: the failure path is for machines without one";
  nccl_unique_id id;
  auto c = nccl_comm::init(id, 1, 0, {std::chrono::milliseconds(2000), std::chrono::milliseconds(2000)});
  ASSERT_FALSE(c);
  EXPECT_FALSE(c.err().to_string().empty());
  comm_manager m;
  auto r = m.rebuild(3, id, 1, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(m.current(3), nullptr);
}

TEST(nccl_comm, refuses_a_rank_outside_the_communicator) {
  nccl_unique_id id;
  auto c = nccl_comm::init(id, 2, 2);
  ASSERT_FALSE(c);
}

// Sum of a size-1 communicator: the buffer scaled by `scale`.
void check_allreduce(nccl_comm& c, stream& s, float scale) {
  std::vector<float> host(1000);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i);
  auto buf = device_buffer<float>::alloc(host.size());
  ASSERT_TRUE(buf) << buf.err().to_string();
  ASSERT_TRUE(buf->upload(host, s.get()));
  auto r = c.allreduce_sum(buf->data(), buf->size(), s.get(), scale);
  ASSERT_TRUE(r) << r.err().to_string();
  std::vector<float> back(host.size());
  ASSERT_TRUE(buf->download(back, s.get()));
  ASSERT_TRUE(s.sync());
  for (std::size_t i = 0; i < host.size(); i += 97) EXPECT_FLOAT_EQ(back[i], host[i] * scale);
}

TEST(nccl_comm, size_one_allreduce_and_broadcast) {
  TROUPE_REQUIRE_GPU();
  ASSERT_TRUE(set_device(0));
  auto s = stream::create();
  ASSERT_TRUE(s) << s.err().to_string();
  auto id = nccl_unique_id::create();
  ASSERT_TRUE(id) << id.err().to_string();
  auto c = nccl_comm::init(*id, 1, 0);
  ASSERT_TRUE(c) << c.err().to_string();
  check_allreduce(*c, *s, 1.0f);
  check_allreduce(*c, *s, 0.25f);
  auto buf = device_buffer<float>::alloc(64);
  ASSERT_TRUE(buf);
  EXPECT_TRUE(c->broadcast(buf->data(), buf->size(), 0, s->get()));
  EXPECT_FALSE(c->broadcast(buf->data(), buf->size(), 1, s->get()));
  EXPECT_TRUE(c->destroy());
  EXPECT_FALSE(c->valid());
}

TEST(nccl_comm, aborted_communicator_refuses_collectives) {
  TROUPE_REQUIRE_GPU();
  ASSERT_TRUE(set_device(0));
  auto s = stream::create();
  ASSERT_TRUE(s);
  auto id = nccl_unique_id::create();
  ASSERT_TRUE(id) << id.err().to_string();
  auto c = nccl_comm::init(*id, 1, 0);
  ASSERT_TRUE(c) << c.err().to_string();
  c->abort();
  EXPECT_FALSE(c->healthy());
  float* none = nullptr;
  auto r = c->allreduce_sum(none, 4, s->get());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), gpu_errc::peer_lost);
}

// Done-when of issue #8: create, use, abort and re-create 100 times with no leaked device memory
// and no hang (each cycle is bounded by the watchdog; the whole loop by the test timeout).
TEST(nccl_comm, churn_100_epochs_without_leak_or_hang) {
  TROUPE_REQUIRE_GPU();
  ASSERT_TRUE(set_device(0));
  auto s = stream::create();
  ASSERT_TRUE(s);
  nccl_options o{std::chrono::milliseconds(20'000), std::chrono::milliseconds(20'000)};
  // TROUPE_NCCL_ABORTS_IN_FLIGHT: another bound on the background aborts (bench/device/run.sh
  // compares 1, the bound before it was one, with the default).
  if (const char* a = std::getenv("TROUPE_NCCL_ABORTS_IN_FLIGHT")) o.aborts_in_flight = std::atoi(a);
  comm_manager m(o);
  std::size_t free_after_warmup = 0;
  // Each cycle is what a membership change costs a GPU worker: a new id, the old communicator
  // aborted, the new one initialised, and the first collective on it finished.
  std::vector<std::chrono::steady_clock::duration> cycles;
  // TROUPE_NCCL_CHURN_EPOCHS: fewer epochs (at least 10), for bench/device/run.sh's comparison of
  // NCCL settings; the test itself runs 100.
  const char* env = std::getenv("TROUPE_NCCL_CHURN_EPOCHS");
  const std::uint64_t epochs = env ? std::max<std::uint64_t>(10, std::strtoull(env, nullptr, 10)) : 100;
  for (std::uint64_t epoch = 1; epoch <= epochs; ++epoch) {
    auto t0 = std::chrono::steady_clock::now();
    auto id = nccl_unique_id::create();
    ASSERT_TRUE(id) << "epoch " << epoch << ": " << id.err().to_string();
    auto c = m.rebuild(epoch, *id, 1, 0);
    ASSERT_TRUE(c) << "epoch " << epoch << ": " << c.err().to_string();
    ASSERT_EQ(m.current(epoch), *c);
    ASSERT_EQ(m.current(epoch - 1), nullptr);
    check_allreduce(**c, *s, epoch % 2 ? 1.0f : 0.5f);
    cycles.push_back(std::chrono::steady_clock::now() - t0);
    if (epoch == 5) {
      m.settle();  // the retired communicators' memory released, so a leak after this one shows
      EXPECT_EQ(m.aborts_under_way(), 0u);
      auto mem = memory_info();
      ASSERT_TRUE(mem) << mem.err().to_string();
      free_after_warmup = mem->free;
    }
  }
  m.abort();
  ASSERT_TRUE(s->sync());
  auto mem = memory_info();
  ASSERT_TRUE(mem) << mem.err().to_string();
  EXPECT_EQ(m.rebuilds(), epochs);
  // 95 more communicators after the warm-up (of 100): a leak of even 1 MiB each would show.
  const std::size_t slack = 64u << 20;
  EXPECT_GE(mem->free + slack, free_after_warmup)
      << "device memory fell from " << free_after_warmup << " to " << mem->free << " bytes free";
  auto first_us = std::chrono::duration_cast<std::chrono::microseconds>(cycles.front()).count();
  std::sort(cycles.begin(), cycles.end());
  auto us = [&](double q) {
    return static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(
                                      cycles[static_cast<std::size_t>(q * (epochs - 1))])
                                      .count());
  };
  auto slowest = cycles.back();
  std::printf(
      "{\"bench\": \"nccl_rebuild\", \"epochs\": %llu, \"first_us\": %lld, \"median_us\": %lld, "
      "\"p90_us\": %lld, \"max_us\": %lld, \"free_after_warmup\": %zu, \"free_at_end\": %zu, "
      "\"aborts_in_flight\": %d}\n",
      static_cast<unsigned long long>(epochs), static_cast<long long>(first_us), us(0.5), us(0.9), us(1.0),
      free_after_warmup, mem->free, o.aborts_in_flight);
  EXPECT_LT(slowest, std::chrono::seconds(20)) << "a cycle took longer than the watchdog";
}

}  // namespace
}  // namespace troupe::gpu
