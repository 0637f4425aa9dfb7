// Rings over two "hosts" in one process: ring sessions on threads, each placed on host A or B by its
// ring member's host key, so ranks on one host link over shared memory and ranks on different hosts
// over TCP on loopback (a rank with one neighbour of each kind uses a mixed link). Sums are exact
// (integer-valued floats); failures are awaited as events (a stalled collective polling its
// neighbour), never after a sleep.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <future>
#include <random>
#include <vector>

#include "fake_ring_context.hpp"
#include "troupe/collective/cleanup.hpp"
#include "troupe/collective/mixed/session.hpp"

namespace troupe::collective {
namespace {

using std::chrono::seconds;
using testing::fake_cluster;
using testing::fake_ring_context;

// 64 KiB shared-memory rings: the larger payloads wrap them many times. The timeout is long enough
// that it is never the error a test expects.
const mixed_session_options options{1 << 16, std::chrono::milliseconds(30'000),
                                    std::chrono::milliseconds(3'000)};

std::vector<float> rank_data(std::size_t rank, std::size_t n) {
  std::vector<float> v(n);
  std::mt19937 g(static_cast<unsigned>(rank) + 11);
  std::uniform_int_distribution<int> d(-100, 100);
  for (auto& x : v) x = static_cast<float>(d(g));
  return v;
}

// Workers worker-0.. in ring order, worker i on hosts[i].
struct hosted_ring {
  fake_cluster cluster;
  std::vector<std::string> hosts;
  std::vector<node_id> ids;
  std::vector<std::unique_ptr<fake_ring_context>> ctx;
  std::vector<std::unique_ptr<mixed_ring_session>> s;

  explicit hosted_ring(std::vector<std::string> h, const mixed_session_options& o = options)
      : hosts(std::move(h)) {
    for (std::size_t i = 0; i < hosts.size(); ++i) {
      ids.push_back({"worker-" + std::to_string(i), 1});
      ctx.push_back(std::make_unique<fake_ring_context>(cluster, ids.back()));
      s.push_back(std::make_unique<mixed_ring_session>(*ctx.back(), o));
    }
  }
  ~hosted_ring() {
    s.clear();
    remove_job_leftovers(cluster.job);
  }
  void publish(std::uint64_t epoch) {
    std::vector<ring_member> members;
    for (std::size_t i = 0; i < hosts.size(); ++i) members.push_back(ctx[i]->member(hosts[i]));
    cluster.publish(epoch, std::move(members));
  }
  std::size_t size() const { return hosts.size(); }
  // body(i) on one thread per worker; each result's error text ("" when it succeeded).
  std::vector<std::string> on_all(const std::function<expected<void>(std::size_t)>& body) {
    std::vector<std::future<expected<void>>> fs;
    for (std::size_t i = 0; i < size(); ++i) fs.push_back(std::async(std::launch::async, body, i));
    std::vector<std::string> errs;
    for (auto& f : fs) {
      auto r = f.get();
      errs.push_back(r ? "" : r.err().to_string());
    }
    return errs;
  }
  std::vector<std::string> ensure_all() {
    return on_all([&](std::size_t i) -> expected<void> {
      auto r = s[i]->ensure();
      if (!r) return r.err();
      EXPECT_EQ(r->rank, static_cast<int>(i));
      return {};
    });
  }
};

void expect_ok(const std::vector<std::string>& errs, const char* what) {
  for (std::size_t i = 0; i < errs.size(); ++i) EXPECT_EQ(errs[i], "") << what << ", worker " << i;
}

void expect_exact_collectives(std::vector<std::string> hosts, const mixed_session_options& o = options) {
  hosted_ring r(std::move(hosts), o);
  r.publish(1);
  expect_ok(r.ensure_all(), "ensure");
  for (std::size_t n : {std::size_t{3}, std::size_t{1000}, std::size_t{100'003}}) {
    std::vector<std::vector<float>> data(r.size());
    std::vector<float> want(n, 0.f);
    for (std::size_t i = 0; i < r.size(); ++i) {
      data[i] = rank_data(i, n);
      for (std::size_t k = 0; k < n; ++k) want[k] += data[i][k];
    }
    expect_ok(r.on_all([&](std::size_t i) { return r.s[i]->allreduce(data[i]); }), "allreduce");
    for (std::size_t i = 0; i < r.size(); ++i)
      ASSERT_EQ(data[i], want) << "worker " << i << ", " << n << " floats";
  }
  for (int root : {0, 2}) {
    std::vector<std::vector<float>> data(r.size());
    for (std::size_t i = 0; i < r.size(); ++i)
      data[i] = rank_data(i == static_cast<std::size_t>(root) ? 99 : i, 50'001);
    expect_ok(r.on_all([&](std::size_t i) { return r.s[i]->broadcast(data[i], root); }), "broadcast");
    for (std::size_t i = 0; i < r.size(); ++i) ASSERT_EQ(data[i], rank_data(99, 50'001)) << "worker " << i;
  }
}

TEST(mixed_ring, two_hosts_of_two_ranks_allreduce_and_broadcast_exactly) {
  expect_exact_collectives({"A", "A", "B", "B"});
}

TEST(mixed_ring, interleaved_hosts_all_tcp_allreduce_and_broadcast_exactly) {
  expect_exact_collectives({"A", "B", "A", "B"});
}

TEST(mixed_ring, a_rank_with_both_neighbours_on_its_host_joins_a_mixed_ring) {
  expect_exact_collectives({"A", "A", "A", "B", "B"});
}

// Every worker asks for 3 lanes of 4 KiB and fused allreduces from 4 KiB: a ring on one host runs
// its large allreduces as the fused pipeline on 3 lanes (its broadcasts split over them); in mixed
// rings only ranks whose previous rank is linked over shared memory on both sides read lanes (a
// mixed link writes lane 0 only), nothing is fused, and the sums stay exact.
TEST(mixed_ring, lanes_on_one_host_and_beside_mixed_links_sum_exactly) {
  mixed_session_options laned = options;
  laned.lanes = 3;
  laned.lane_min_bytes = 4096;
  laned.fused_min_bytes = 4096;
  for (auto hosts :
       {std::vector<std::string>{"A", "A", "A", "A"}, std::vector<std::string>{"A", "A", "A", "B"},
        std::vector<std::string>{"A", "A", "B", "B"}}) {
    SCOPED_TRACE(hosts.size() == 4 ? hosts[2] + hosts[3] : "");
    expect_exact_collectives(hosts, laned);
  }
}

// worker-2 (host B) exits while the others are in an allreduce it never joined: worker-1 (host A,
// TCP to worker-2) sees the connection close, worker-3 (host B, shared memory from worker-2) its
// liveness; both fail with peer_dead long before the operation timeout.
TEST(mixed_ring, a_neighbour_that_exits_fails_both_of_its_neighbours_fast) {
  hosted_ring r({"A", "A", "B", "B"});
  r.publish(1);
  expect_ok(r.ensure_all(), "ensure");
  std::vector<std::vector<float>> data(4, std::vector<float>(1000, 1.f));
  std::vector<std::future<expected<void>>> f(4);
  for (std::size_t i : {0u, 1u, 3u})
    f[i] = std::async(std::launch::async, [&, i] { return r.s[i]->allreduce(data[i]); });
  // worker-1 polls worker-0 (its shared-memory neighbour) and worker-3 polls worker-2 while stalled.
  ASSERT_TRUE(r.cluster.live.wait_polls(r.ids[0], 3, seconds(30))) << "worker-1 never stalled";
  ASSERT_TRUE(r.cluster.live.wait_polls(r.ids[2], 3, seconds(30))) << "worker-3 never stalled";
  r.s[2].reset();  // its links close, as a dead process's do
  r.cluster.live.mark_gone(r.ids[2]);
  for (std::size_t i : {1u, 3u}) {
    ASSERT_EQ(f[i].wait_for(seconds(5)), std::future_status::ready) << "worker " << i << ": no fast failure";
    auto res = f[i].get();
    ASSERT_FALSE(res) << "worker " << i;
    EXPECT_TRUE(res.err() == collective_errc::peer_dead) << "worker " << i << ": " << res.err().to_string();
  }
  r.cluster.publish(2, {r.ctx[0]->member("A"), r.ctx[1]->member("A"), r.ctx[3]->member("B")});
  ASSERT_EQ(f[0].wait_for(seconds(5)), std::future_status::ready) << "worker-0: no fast failure";
  EXPECT_FALSE(f[0].get());
}

TEST(mixed_ring, an_epoch_change_cancels_a_mixed_allreduce_and_the_next_ring_works) {
  hosted_ring r({"A", "A", "B", "B"});
  r.publish(1);
  expect_ok(r.ensure_all(), "ensure");
  std::vector<std::vector<float>> data(4, std::vector<float>(1000, 1.f));
  std::vector<std::future<expected<void>>> f;
  for (std::size_t i = 0; i < 3; ++i)
    f.push_back(std::async(std::launch::async, [&, i] { return r.s[i]->allreduce(data[i]); }));
  // worker-2 polls worker-3, which never joins, while stalled.
  ASSERT_TRUE(r.cluster.live.wait_polls(r.ids[3], 3, seconds(30))) << "worker-2 never stalled";
  r.publish(2);
  for (std::size_t i = 0; i < 3; ++i) {
    ASSERT_EQ(f[i].wait_for(seconds(5)), std::future_status::ready) << "worker " << i << ": no fast failure";
    auto res = f[i].get();
    ASSERT_FALSE(res);
    EXPECT_TRUE(res.err() == collective_errc::cancelled) << "worker " << i << ": " << res.err().to_string();
  }
  auto late = r.s[3]->allreduce(data[3]);
  ASSERT_FALSE(late);
  EXPECT_TRUE(late.err() == collective_errc::cancelled) << late.err().to_string();

  expect_ok(r.ensure_all(), "ensure of epoch 2");
  for (std::size_t i = 0; i < 4; ++i) data[i] = rank_data(i, 5000);
  std::vector<float> want(5000, 0.f);
  for (const auto& d : data)
    for (std::size_t k = 0; k < d.size(); ++k) want[k] += d[k];
  expect_ok(r.on_all([&](std::size_t i) { return r.s[i]->allreduce(data[i]); }), "allreduce of epoch 2");
  for (std::size_t i = 0; i < 4; ++i) ASSERT_EQ(data[i], want) << "worker " << i;
}

// A ring of two on two hosts is one TCP link: a partner whose process is gone closes it, and the
// survivor trains alone until the next view.
TEST(mixed_ring, a_ring_of_two_hosts_whose_partner_exits_leaves_the_survivor_alone) {
  hosted_ring r({"A", "B"});
  r.publish(1);
  expect_ok(r.ensure_all(), "ensure");
  r.s[1].reset();
  std::vector<float> data(1000, 1.f);
  auto res = r.s[0]->allreduce(data);
  ASSERT_FALSE(res);
  EXPECT_TRUE(res.err() == collective_errc::peer_dead) << res.err().to_string();
  EXPECT_TRUE(r.s[0]->alone());
  auto solo = r.s[0]->ensure();
  ASSERT_TRUE(solo) << solo.err().to_string();
  EXPECT_EQ(solo->size, 1);
}

}  // namespace
}  // namespace troupe::collective
