// The ring session of workers on one host (shared-memory links) driven through fakes of its node
// (fake_ring_context.hpp): two sessions on two threads of this process, over real shared-memory rings. Each
// test waits on the event it needs (a collective polling its stalled neighbour), never on a sleep.
#include "troupe/collective/mixed/session.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <numeric>
#include <vector>

#include "fake_ring_context.hpp"
#include "troupe/collective/cleanup.hpp"

namespace troupe::collective {
namespace {

using std::chrono::seconds;
using testing::fake_cluster;
using testing::fake_ring_context;

// Long enough that an error caused by it (timeout) is never the one a test expects.
const mixed_session_options options{1 << 16, std::chrono::milliseconds(30'000)};

struct two_workers {
  fake_cluster cluster;
  node_id a{"worker-0", 1}, b{"worker-1", 1};
  fake_ring_context ctx_a{cluster, a}, ctx_b{cluster, b};
  mixed_ring_session sa{ctx_a, options}, sb{ctx_b, options};

  ~two_workers() { remove_job_leftovers(cluster.job); }

  // The ring of epoch 1, then worker-0 in an allreduce that worker-1 does not join, polling
  // worker-1's liveness at each wait slice. Returns the allreduce's future (`data` stays alive).
  std::future<expected<void>> ring_then_stalled_allreduce(std::vector<float>& data) {
    cluster.publish(1, {a, b});
    auto [ia, ib] = ensure_both();
    EXPECT_TRUE(ia && ib);
    auto stalled = std::async(std::launch::async, [this, &data] { return sa.allreduce(data); });
    EXPECT_TRUE(cluster.live.wait_polls(b, 3, seconds(30))) << "the allreduce never waited on worker-1";
    return stalled;
  }

  // Both sessions build the ring of the current epoch (each waits for the other's ring).
  std::pair<expected<ring_session::info>, expected<ring_session::info>> ensure_both() {
    auto fa = std::async(std::launch::async, [&] { return sa.ensure(); });
    auto ib = sb.ensure();
    return {fa.get(), std::move(ib)};
  }
};

std::vector<float> filled(std::size_t n, float v) {
  return std::vector<float>(n, v);
}

TEST(ring_session, an_epoch_change_mid_allreduce_cancels_it_and_the_next_ring_works) {
  two_workers w;
  w.cluster.publish(1, {w.a, w.b});
  auto [ia, ib] = w.ensure_both();
  ASSERT_TRUE(ia) << ia.err().to_string();
  ASSERT_TRUE(ib) << ib.err().to_string();
  EXPECT_EQ(ia->size, 2);
  EXPECT_EQ(ia->rank + ib->rank, 1);
  EXPECT_EQ(ia->epoch, 1u);
  EXPECT_TRUE(ia->fresh);

  // worker-0 starts an allreduce that worker-1 does not join: it sends its segment and stalls,
  // polling worker-1's liveness at each wait slice.
  auto data_a = filled(1000, 1.f);
  auto stalled = std::async(std::launch::async, [&] { return w.sa.allreduce(data_a); });
  ASSERT_TRUE(w.cluster.live.wait_polls(w.b, 3, seconds(30))) << "the allreduce never waited on worker-1";
  w.cluster.publish(2, {w.a, w.b});  // the master's next view: a new ring
  ASSERT_EQ(stalled.wait_for(seconds(5)), std::future_status::ready) << "no fast failure";
  auto ra = stalled.get();
  ASSERT_FALSE(ra);
  EXPECT_TRUE(ra.err() == collective_errc::cancelled) << ra.err().to_string();
  // worker-1, late, finds the ring of epoch 1 over as well.
  auto data_b = filled(1000, 2.f);
  auto rb = w.sb.allreduce(data_b);
  ASSERT_FALSE(rb);
  EXPECT_TRUE(rb.err() == collective_errc::cancelled) << rb.err().to_string();
  EXPECT_FALSE(w.sa.alone()) << "a cancelled collective says nothing about the peer";
  EXPECT_TRUE(w.cluster.reports.empty());

  // Training goes on with the ring of the new epoch.
  auto [ja, jb] = w.ensure_both();
  ASSERT_TRUE(ja) << ja.err().to_string();
  ASSERT_TRUE(jb) << jb.err().to_string();
  EXPECT_EQ(ja->epoch, 2u);
  EXPECT_TRUE(ja->fresh);
  std::iota(data_a.begin(), data_a.end(), 0.f);
  data_b = filled(1000, 1.f);
  auto fa = std::async(std::launch::async, [&] { return w.sa.allreduce(data_a); });
  auto sb = w.sb.allreduce(data_b);
  auto sa = fa.get();
  ASSERT_TRUE(sa) << sa.err().to_string();
  ASSERT_TRUE(sb) << sb.err().to_string();
  for (std::size_t i = 0; i < data_a.size(); ++i) {
    ASSERT_EQ(data_a[i], static_cast<float>(i) + 1.f) << i;
    ASSERT_EQ(data_b[i], data_a[i]) << i;
  }
  auto again = w.sa.ensure();
  ASSERT_TRUE(again);
  EXPECT_FALSE(again->fresh) << "the same epoch keeps its ring";
}

TEST(ring_session, a_dead_partner_fails_the_allreduce_is_reported_and_leaves_this_worker_alone) {
  two_workers w;
  auto data_a = filled(1000, 1.f);
  auto stalled = w.ring_then_stalled_allreduce(data_a);
  ASSERT_FALSE(::testing::Test::HasFailure());
  w.cluster.live.mark_gone(w.b);  // worker-1's process exits (its liveness says so)
  ASSERT_EQ(stalled.wait_for(seconds(5)), std::future_status::ready) << "no fast failure";
  auto ra = stalled.get();
  ASSERT_FALSE(ra);
  EXPECT_TRUE(ra.err() == collective_errc::peer_dead) << ra.err().to_string();

  // The master is told, naming the dead node; until its next view worker-0 is the whole ring.
  ASSERT_EQ(w.cluster.reports.size(), 1u);
  EXPECT_EQ(w.cluster.reports[0].first, w.b);
  EXPECT_TRUE(w.sa.alone());
  auto solo = w.sa.ensure();
  ASSERT_TRUE(solo) << solo.err().to_string();
  EXPECT_EQ(solo->size, 1);
  EXPECT_EQ(solo->epoch, 1u);
  EXPECT_TRUE(w.sa.allreduce(data_a)) << "alone, an allreduce is a no-op";

  w.cluster.publish(2, {w.a});  // the master's view without worker-1
  EXPECT_FALSE(w.sa.alone());
  auto next = w.sa.ensure();
  ASSERT_TRUE(next) << next.err().to_string();
  EXPECT_EQ(next->size, 1);
  EXPECT_EQ(next->epoch, 2u);
}

// The master hears of the death first (the runner saw the SIGKILL): its view of this worker alone
// cancels the collective, and the step under way is this worker's alone, as when the ring itself
// found the partner dead.
TEST(ring_session, a_view_of_this_worker_alone_mid_allreduce_leaves_it_alone_in_that_epoch) {
  two_workers w;
  auto data_a = filled(1000, 1.f);
  auto stalled = w.ring_then_stalled_allreduce(data_a);
  ASSERT_FALSE(::testing::Test::HasFailure());
  w.cluster.publish(2, {w.a});  // the master's view without worker-1, before any liveness says so
  ASSERT_EQ(stalled.wait_for(seconds(5)), std::future_status::ready) << "no fast failure";
  auto ra = stalled.get();
  ASSERT_FALSE(ra);
  EXPECT_TRUE(ra.err() == collective_errc::cancelled) << ra.err().to_string();
  EXPECT_TRUE(w.sa.alone()) << "the new view holds worker-0 alone";
  EXPECT_TRUE(w.cluster.reports.empty()) << "nothing was seen dead";
  auto solo = w.sa.ensure();
  ASSERT_TRUE(solo) << solo.err().to_string();
  EXPECT_EQ(solo->size, 1);
  EXPECT_EQ(solo->epoch, 2u);
  EXPECT_FALSE(solo->fresh) << "alone, the replica is the ring's: nothing to resynchronise";
  EXPECT_TRUE(w.sa.allreduce(data_a)) << "alone, an allreduce is a no-op";

  // A newcomer's view ends it (a cancelled ring whose next view holds two is never alone: the
  // first test).
  w.cluster.publish(3, {w.a, node_id{"worker-2", 1}});
  EXPECT_FALSE(w.sa.alone());
}

TEST(ring_session, a_worker_outside_the_ring_cannot_build_it) {
  two_workers w;
  w.cluster.publish(1, {w.b});
  auto r = w.sa.ensure();
  ASSERT_FALSE(r);
  EXPECT_TRUE(r.err() == collective_errc::setup);
}

}  // namespace
}  // namespace troupe::collective
