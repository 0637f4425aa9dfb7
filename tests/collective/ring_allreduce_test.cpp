// Ring allreduce over shared-memory links between real processes (fork), and its failure modes:
// a killed neighbour, a changed epoch, mismatched operations.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <future>
#include <random>
#include <thread>
#include <vector>

#include "troupe/collective/cleanup.hpp"
#include "troupe/collective/shm/link.hpp"
#include "troupe/transport/shm_ring.hpp"

namespace troupe::collective {
namespace {

TEST(segment_bounds, covers_everything_once) {
  for (size_t n : {0u, 1u, 7u, 100u, 1001u}) {
    for (int parts : {1, 2, 3, 4, 7}) {
      size_t expect_begin = 0;
      for (int i = 0; i < parts; ++i) {
        auto [b, e] = segment_bounds(n, parts, i);
        EXPECT_EQ(b, expect_begin);
        EXPECT_LE(e - b, n / parts + 1);
        expect_begin = e;
      }
      EXPECT_EQ(expect_begin, n);
    }
  }
}

std::string job_name(const char* t) {
  return std::string(t) + std::to_string(::getpid());
}

std::vector<float> rank_data(int rank, size_t n) {
  std::vector<float> v(n);
  std::mt19937 g(rank + 1);
  std::uniform_int_distribution<int> d(-100, 100);
  for (auto& x : v) x = static_cast<float>(d(g));  // integers: sums are exact in float
  return v;
}

// What an allreduce of rank_data over `size` ranks gives.
std::vector<float> sum_of_ranks(int size, size_t n) {
  std::vector<float> sum(n, 0.f);
  for (int r = 0; r < size; ++r) {
    auto d = rank_data(r, n);
    for (size_t i = 0; i < n; ++i) sum[i] += d[i];
  }
  return sum;
}

// How run_ranks links its ranks: rank r makes lanes[r] lanes of `lane_bytes` (1 lane when `lanes`
// is empty); `fused`: the ring is all on one host, allreduces of `fused_min` bytes or more fused.
struct link_setup {
  std::vector<int> lanes;
  std::size_t lane_bytes = 1 << 20;
  bool fused = false;
  std::size_t fused_min = 0;
};

// Runs `size` ranks as forked processes; returns each child's exit code (0 = verified OK).
std::vector<int> run_ranks(int size, size_t n, const std::string& job, int ops,
                           const std::function<int(int, shm_ring_link&, std::vector<float>&, int)>& body,
                           const link_setup& setup = {}) {
  const auto& lanes = setup.lanes;
  std::vector<pid_t> pids;
  for (int r = 0; r < size; ++r) {
    pid_t p = ::fork();
    if (p == 0) {
      shm_link_options o;
      o.job = job;
      o.epoch = 1;
      o.rank = r;
      o.size = size;
      o.capacity = 1 << 16;
      o.prev_pid = 0;
      o.timeout = std::chrono::seconds(5);
      if (!lanes.empty()) o.lanes = lanes[static_cast<std::size_t>(r)];
      o.lane_min_bytes = setup.lane_bytes;
      o.all_on_host = setup.fused;
      o.fused_min_bytes = setup.fused_min;
      auto link = shm_ring_link::connect(o);
      if (!link) _exit(10);
      // Each rank reads its own lanes and writes as many as the next rank made.
      if (!lanes.empty() && ((*link)->lanes_in() != lanes[static_cast<std::size_t>(r)] ||
                             (*link)->lanes_out() != lanes[static_cast<std::size_t>((r + 1) % size)]))
        _exit(11);
      auto data = rank_data(r, n);
      int rc = 0;
      for (int op = 0; op < ops && rc == 0; ++op) rc = body(r, **link, data, op);
      _exit(rc);
    }
    pids.push_back(p);
  }
  std::vector<int> codes;
  for (pid_t p : pids) {
    int st = 0;
    ::waitpid(p, &st, 0);
    codes.push_back(WIFEXITED(st) ? WEXITSTATUS(st) : 100 + WTERMSIG(st));
  }
  return codes;
}

class ring_sizes : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(ring_sizes, sums_exactly_in_every_process) {
  auto [size, n] = GetParam();
  const auto expect = sum_of_ranks(size, n);
  auto codes = run_ranks(size, n, job_name("sum"), 3,
                         [&](int rank, shm_ring_link& link, std::vector<float>& data, int op) {
                           auto fresh = rank_data(rank, n);
                           data = fresh;
                           auto r = ring_allreduce(link, rank, size, data, 1, op);
                           if (!r) return 20;
                           return data == expect ? 0 : 21;
                         });
  for (int c : codes) EXPECT_EQ(c, 0);
}

INSTANTIATE_TEST_SUITE_P(shapes, ring_sizes,
                         ::testing::Values(std::make_tuple(2, size_t(1)), std::make_tuple(2, size_t(100000)),
                                           std::make_tuple(3, size_t(5)), std::make_tuple(3, size_t(77777)),
                                           std::make_tuple(4, size_t(1 << 18))));

// Every root, several sizes, payloads larger than the ring (the root then waits for readers) and
// smaller; followed by an allreduce on the same link (the ring is in step after a broadcast).
class broadcast_shapes : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(broadcast_shapes, every_rank_gets_the_roots_data) {
  auto [size, n] = GetParam();
  auto codes = run_ranks(size, n, job_name("bcast"), size,
                         [&](int rank, shm_ring_link& link, std::vector<float>& data, int op) {
                           int root = op % size;
                           data = rank_data(rank, n);
                           auto r = ring_broadcast(link, rank, size, data, root, 1, 2 * op);
                           if (!r) return 30;
                           if (data != rank_data(root, n)) return 31;
                           std::vector<float> ones(7, 1.0f);
                           if (!ring_allreduce(link, rank, size, ones, 1, 2 * op + 1)) return 32;
                           return ones == std::vector<float>(7, static_cast<float>(size)) ? 0 : 33;
                         });
  for (int c : codes) EXPECT_EQ(c, 0);
}

INSTANTIATE_TEST_SUITE_P(shapes, broadcast_shapes,
                         ::testing::Values(std::make_tuple(2, size_t(3)), std::make_tuple(2, size_t(100000)),
                                           std::make_tuple(3, size_t(1000)),
                                           std::make_tuple(4, size_t(50000))));

// Lanes: each rank with its own count (1, 2, 3 or 4), exchanges split into slices of up to 4 KiB
// floats on threads of their own: sums and broadcasts exact, sizes that split unevenly, sizes
// too small to split, and the lanes' rings gone from /dev/shm once every rank has linked.
class lane_shapes : public ::testing::TestWithParam<std::tuple<std::vector<int>, size_t>> {};

TEST_P(lane_shapes, split_transfers_sum_and_broadcast_exactly) {
  auto [lanes, n] = GetParam();
  const int size = static_cast<int>(lanes.size());
  const auto expect = sum_of_ranks(size, n);
  auto job = job_name("lanes");
  auto codes = run_ranks(size, n, job, 4,
                         [&](int rank, shm_ring_link& link, std::vector<float>& data, int op) {
                           data = rank_data(rank, n);
                           if (op % 2 == 0) {
                             if (!ring_allreduce(link, rank, size, data, 1, op)) return 20;
                             return data == expect ? 0 : 21;
                           }
                           int root = op / 2 % size;
                           if (!ring_broadcast(link, rank, size, data, root, 1, op)) return 30;
                           if (data != rank_data(root, n)) return 31;
                           for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
                             if (e.path().filename().string().find(job) != std::string::npos) return 40;
                           return 0;
                         },
                         {lanes, 4096});
  for (int c : codes) EXPECT_EQ(c, 0);
}

INSTANTIATE_TEST_SUITE_P(shapes, lane_shapes,
                         ::testing::Values(std::make_tuple(std::vector<int>{2, 2}, size_t(100000)),
                                           std::make_tuple(std::vector<int>{1, 3, 2}, size_t(77777)),
                                           std::make_tuple(std::vector<int>{4, 1, 4, 2}, size_t(1 << 18)),
                                           std::make_tuple(std::vector<int>{3, 3, 3},
                                                           size_t(2000))));  // under 2 lanes' worth

// The fused pipeline (all_on_host): 64 KiB rings, so 16 KiB chunks and many rounds; segments that
// split unevenly and chunks left empty; ranks with different lane counts (the pipeline takes the
// fewest); each allreduce followed on the same link by a broadcast and a small allreduce of
// exchanges (the rings stay in step).
class fused_shapes : public ::testing::TestWithParam<std::tuple<std::vector<int>, size_t>> {};

TEST_P(fused_shapes, pipelined_sums_are_exact) {
  auto [lanes, n] = GetParam();
  const int size = static_cast<int>(lanes.size());
  const auto expect = sum_of_ranks(size, n);
  auto codes = run_ranks(
      size, n, job_name("fused"), 3,
      [&](int rank, shm_ring_link& link, std::vector<float>& data, int op) {
        data = rank_data(rank, n);
        if (!ring_allreduce(link, rank, size, data, 1, 3 * op)) return 20;
        if (data != expect) return 21;
        std::vector<float> b = rank_data(rank, 1000);
        if (!ring_broadcast(link, rank, size, b, op % size, 1, 3 * op + 1) || b != rank_data(op % size, 1000))
          return 22;
        std::vector<float> ones(5, 1.f);  // under fused_min: exchanges
        if (!ring_allreduce(link, rank, size, ones, 1, 3 * op + 2)) return 23;
        return ones == std::vector<float>(5, static_cast<float>(size)) ? 0 : 24;
      },
      {lanes, 4096, true, 64});
  for (int c : codes) EXPECT_EQ(c, 0);
}

INSTANTIATE_TEST_SUITE_P(shapes, fused_shapes,
                         ::testing::Values(std::make_tuple(std::vector<int>{1, 1}, size_t(100)),
                                           std::make_tuple(std::vector<int>{1, 1}, size_t(100001)),
                                           std::make_tuple(std::vector<int>{1, 1, 1}, size_t(77777)),
                                           std::make_tuple(std::vector<int>{2, 2, 2, 2}, size_t(1 << 18)),
                                           std::make_tuple(std::vector<int>{3, 1, 2}, size_t(50000)),
                                           std::make_tuple(std::vector<int>{4, 4, 4, 4, 4}, size_t(123457))));

// A rank that has its inbound ring made ahead (populated) links with it, under the ring's name,
// and the collective works as with fresh rings; the spare is used up.
TEST(ring_allreduce, a_spare_ring_becomes_the_inbound_ring) {
  std::string job = "spare" + std::to_string(::getpid());
  pid_t peer = ::fork();
  if (peer == 0) {
    shm_link_options o{job, 1, 1, 2, 0, 0, 1 << 16, std::chrono::seconds(5), nullptr};
    auto link = shm_ring_link::connect(o);
    if (!link) _exit(10);
    std::vector<float> v(5000, 2.f);
    _exit(ring_allreduce(**link, 1, 2, v, 1, 1) && v[0] == 3.f && v[4999] == 3.f ? 0 : 11);
  }
  auto spare_name = "troupe-" + job + "-e0-r0-spare";
  auto spare = transport::shm_ring::create(spare_name, 1 << 16, true);
  ASSERT_TRUE(spare) << spare.err().to_string();
  std::unique_ptr<transport::shm_ring> held = std::move(*spare);
  shm_link_options o{job, 1, 0, 2, peer, peer, 1 << 16, std::chrono::seconds(5), nullptr};
  o.spare = &held;
  auto link = shm_ring_link::connect(o);
  ASSERT_TRUE(link) << link.err().to_string();
  EXPECT_EQ(held, nullptr) << "the link takes the spare";
  EXPECT_FALSE(std::filesystem::exists("/dev/shm/" + spare_name));
  std::vector<float> v(5000, 1.f);
  ASSERT_TRUE(ring_allreduce(**link, 0, 2, v, 1, 1));
  EXPECT_EQ(v[0], 3.f);
  EXPECT_EQ(v[4999], 3.f);
  int status = 0;
  ASSERT_EQ(::waitpid(peer, &status, 0), peer);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "peer status " << status;
}

TEST(ring_allreduce, size_one_is_a_no_op) {
  struct no_link : ring_link {
    expected<void> exchange(const step_tag&, std::span<const float>, std::span<float>, bool) override {
      ADD_FAILURE() << "no exchange expected";
      return {};
    }
    expected<void> send(const step_tag&, std::span<const float>) override {
      ADD_FAILURE() << "no send expected";
      return {};
    }
    expected<void> recv(const step_tag&, std::span<float>) override {
      ADD_FAILURE() << "no recv expected";
      return {};
    }
  } link;
  std::vector<float> v{1, 2, 3};
  EXPECT_TRUE(ring_allreduce(link, 0, 1, v, 1, 1));
  EXPECT_EQ(v, (std::vector<float>{1, 2, 3}));
}

// Rank 1 (a child) links as `setup` says, takes part in a first allreduce of 3000 floats when
// `together` (for the fused pipeline: it agrees on the lanes), then never in the next: it is
// SIGKILLed 100 ms into rank 0's allreduce of 1M floats, which must fail with peer_dead long
// before its 30 s timeout.
void expect_peer_dead_on_kill(const std::string& job, const std::function<void(shm_link_options&)>& setup,
                              bool together) {
  auto link_as = [&](int rank, pid_t peer, std::chrono::milliseconds timeout) {
    shm_link_options o{job, 1, rank, 2, peer, peer, 1 << 16, timeout, nullptr};
    setup(o);
    return shm_ring_link::connect(o);
  };
  std::vector<float> first(3000, 1.f);
  pid_t victim = ::fork();
  if (victim == 0) {
    auto link = link_as(1, 0, std::chrono::seconds(5));
    if (!link) _exit(10);
    if (together && !ring_allreduce(**link, 1, 2, first, 1, 1)) _exit(11);
    ::pause();  // never takes part: it is killed
    _exit(0);
  }
  auto link = link_as(0, victim, std::chrono::seconds(30));
  ASSERT_TRUE(link) << link.err().to_string();
  if (together) {
    ASSERT_TRUE(ring_allreduce(**link, 0, 2, first, 1, 1));
    EXPECT_EQ(first, std::vector<float>(3000, 2.f));
  }
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::kill(victim, SIGKILL);
  });
  std::vector<float> data(1 << 20, 1.f);
  auto t0 = std::chrono::steady_clock::now();
  auto r = ring_allreduce(**link, 0, 2, data, 1, 7);
  auto took = std::chrono::steady_clock::now() - t0;
  killer.join();
  ::waitpid(victim, nullptr, 0);
  link->reset();
  remove_job_leftovers(job);  // the killed rank's rings (each run left them in /dev/shm)
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == collective_errc::peer_dead) << r.err().to_string();
  EXPECT_LT(took, std::chrono::seconds(5)) << "must not wait for the 30 s timeout";
}

TEST(ring_allreduce, killed_neighbour_fails_fast) {
  expect_peer_dead_on_kill(
      job_name("kill"), [](shm_link_options&) {}, false);
}

// With lanes, a neighbour's death is noticed by the lane that waits on it: peer_dead, not the
// "another lane failed" of the lanes it stops.
TEST(ring_allreduce, killed_neighbour_fails_fast_on_every_lane) {
  expect_peer_dead_on_kill(
      job_name("lanekill"),
      [](shm_link_options& o) {
        o.lanes = 4;
        o.lane_min_bytes = 1 << 16;
      },
      false);
}

// The fused pipeline fails as the exchanges do, on its lanes.
TEST(ring_allreduce, killed_neighbour_fails_a_fused_allreduce_fast) {
  expect_peer_dead_on_kill(
      job_name("fusedkill"),
      [](shm_link_options& o) {
        o.lanes = 2;
        o.lane_min_bytes = 4096;
        o.all_on_host = true;
        o.fused_min_bytes = 0;
      },
      true);
}

TEST(ring_allreduce, lane_options_out_of_range_are_refused) {
  for (int lanes : {0, shm_ring_link::max_lanes + 1}) {
    shm_link_options o{job_name("badlanes"), 1, 0, 2, 0, 0, 1 << 16, std::chrono::seconds(1), nullptr};
    o.lanes = lanes;
    auto link = shm_ring_link::connect(o);
    ASSERT_FALSE(link);
    EXPECT_TRUE(link.err() == collective_errc::setup) << link.err().to_string();
    EXPECT_NE(link.err().to_string().find("lanes"), std::string::npos) << link.err().to_string();
  }
}

TEST(ring_allreduce, epoch_change_cancels) {
  auto job = job_name("epoch");
  std::atomic<std::uint64_t> current{1};
  std::promise<void> returned;
  std::thread other([&, done = returned.get_future()] {
    shm_link_options o{job, 1, 1, 2, 0, 0, 1 << 16, std::chrono::seconds(5), nullptr};
    auto link = shm_ring_link::connect(o);
    done.wait();  // holds the link, never exchanges, until rank 0's collective has returned
  });
  shm_link_options o{job, 1, 0, 2, 0, 0, 1 << 16, std::chrono::seconds(30), &current};
  auto link = shm_ring_link::connect(o);
  ASSERT_TRUE(link);
  std::thread bump([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    current = 2;
  });
  std::vector<float> data(1 << 18, 1.f);
  auto r = ring_allreduce(**link, 0, 2, data, 1, 1);
  returned.set_value();
  bump.join();
  other.join();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == collective_errc::cancelled) << r.err().to_string();
}

TEST(ring_allreduce, mismatched_op_is_a_protocol_error) {
  const auto job = job_name("proto");
  auto codes = run_ranks(2, 1000, job, 1, [](int rank, shm_ring_link& link, std::vector<float>& d, int) {
    auto r = ring_allreduce(link, rank, 2, d, 1, rank == 0 ? 5 : 6);
    return (!r && r.err() == collective_errc::protocol) ? 0 : 30;
  });
  remove_job_leftovers(job);  // a rank that ends on an error leaves its ring behind
  for (int c : codes) EXPECT_EQ(c, 0);
}

// Replicas of two sizes (a worker whose module file changed while the job ran) on the same op: the
// error names both counts and the likely cause ("expected epoch 1 op 7 step 0, got epoch 1 op 7 step
// 0" said nothing).
TEST(ring_allreduce, a_neighbour_of_another_size_is_named) {
  const auto job = job_name("sizes");
  auto codes = run_ranks(2, 1000, job, 1, [](int rank, shm_ring_link& link, std::vector<float>& d, int) {
    if (rank == 1) d.resize(1200, 1.f);
    auto r = ring_allreduce(link, rank, 2, d, 1, 7);
    if (r || r.err() != collective_errc::protocol) return 30;
    const auto text = r.err().to_string();
    return text.find(" floats, got epoch 1 op 7 step 0 of ") != std::string::npos &&
                   text.find("another size") != std::string::npos
               ? 0
               : 31;
  });
  remove_job_leftovers(job);
  for (int c : codes) EXPECT_EQ(c, 0);
}

// The fused pipeline checks every message's header as the exchanges do: after one fused allreduce
// together (the lanes agreed), ranks on different ops fail with `protocol`.
TEST(ring_allreduce, mismatched_op_in_the_fused_pipeline_is_a_protocol_error) {
  auto codes = run_ranks(2, 1000, job_name("fusedproto"), 2,
                         [](int rank, shm_ring_link& link, std::vector<float>& d, int op) {
                           if (op == 0) return ring_allreduce(link, rank, 2, d, 1, 1) ? 0 : 20;
                           auto r = ring_allreduce(link, rank, 2, d, 1, rank == 0 ? 5 : 6);
                           return (!r && r.err() == collective_errc::protocol) ? 0 : 30;
                         },
                         {{}, 4096, true, 64});
  for (int c : codes) EXPECT_EQ(c, 0);
}

TEST(ring_allreduce, timeout_when_neighbour_is_silent) {
  auto job = job_name("silent");
  std::promise<void> returned;
  std::thread other([&, done = returned.get_future()] {
    shm_link_options o{job, 1, 1, 2, 0, 0, 1 << 16, std::chrono::seconds(5), nullptr};
    auto link = shm_ring_link::connect(o);
    done.wait();  // silent, and alive until rank 0's collective has returned
  });
  shm_link_options o{job, 1, 0, 2, 0, 0, 1 << 16, std::chrono::milliseconds(100), nullptr};
  auto link = shm_ring_link::connect(o);
  ASSERT_TRUE(link);
  std::vector<float> data(100, 1.f);
  auto r = ring_allreduce(**link, 0, 2, data, 1, 1);
  returned.set_value();
  other.join();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == collective_errc::timeout) << r.err().to_string();
}

}  // namespace
}  // namespace troupe::collective
