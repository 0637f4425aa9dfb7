// Two of node_runtime's parts without a transport: the membership view a node follows (node_view:
// epochs only forward, a restarted master's new sequence, a stale master ignored, ring waits on a
// manual clock), its side of joining and leaving (membership_client over fake links), and the
// fault injector's resets (over a fake endpoint setter).
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "node/fault_injector.hpp"
#include "node/membership_client.hpp"
#include "node/node_view.hpp"
#include "troupe/core/clock.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;
using B = schema::Envelope::Body;

const node_id self{"worker-0", 2};

// A view at `epoch` listing `members`, from master incarnation `master`, ring epoch `ring`.
wire::membership_msg view_msg(std::uint64_t epoch, std::uint64_t master, std::uint64_t ring,
                              std::vector<node_id> members = {self}) {
  std::vector<cluster::member> ms;
  for (auto& id : members) {
    cluster::member m;
    m.id = id;
    m.role = cluster::node_role::worker;
    m.address = "127.0.0.1:1";
    m.state = cluster::member_state::alive;
    ms.push_back(m);
  }
  auto v = cluster::membership_view::restore(epoch, cluster::worker_limits{1, 4}, ms);
  EXPECT_TRUE(v) << v.err().to_string();
  wire::membership_msg msg;
  if (v) msg.view = *v;
  msg.master_incarnation = master;
  msg.ring_epoch = ring;
  return msg;
}

TEST(node_view, views_move_forward_and_a_restarted_master_starts_a_new_sequence) {
  node_view v;
  EXPECT_EQ(v.view().epoch(), 0u);
  EXPECT_FALSE(v.joined());
  EXPECT_TRUE(v.take(view_msg(3, 1, 2), true));
  EXPECT_EQ(v.view().epoch(), 3u);
  EXPECT_EQ(v.ring_epoch().load(), 2u);
  EXPECT_TRUE(v.joined());
  EXPECT_FALSE(v.take(view_msg(3, 1, 5), true)) << "not newer";
  EXPECT_FALSE(v.take(view_msg(2, 1, 5), true));
  EXPECT_EQ(v.ring_epoch().load(), 2u);
  // A relaunched master (incarnation 2) starts again at epoch 1.
  EXPECT_TRUE(v.take(view_msg(1, 2, 1), true));
  EXPECT_EQ(v.view_and_ring_epoch().first.epoch(), 1u);
  EXPECT_EQ(v.view_and_ring_epoch().second, 1u);
  EXPECT_EQ(v.master_incarnation(), 2u);
  // Its predecessor, woken up late, speaks for nobody.
  EXPECT_FALSE(v.from_current_master(view_msg(9, 1, 9)));
  EXPECT_TRUE(v.from_current_master(view_msg(9, 2, 9)));
  v.master_down();
  EXPECT_FALSE(v.joined());
  // Back after the master's pause: it joins again and gets the same view whole; it is a member
  // again (it kept re-joining every 250 ms), nothing else changes.
  EXPECT_FALSE(v.take(view_msg(1, 2, 7), true)) << "not newer";
  EXPECT_TRUE(v.joined());
  EXPECT_EQ(v.ring_epoch().load(), 1u);
}

TEST(node_view, a_ring_wait_ends_at_the_change_or_at_its_deadline_on_the_clock) {
  node_view v;
  manual_clock clk;
  EXPECT_TRUE(v.take(view_msg(1, 1, 4), true));
  const auto t0 = clk.now();
  v.wait_ring_change(3, t0 + 1s, clk);  // already moved: no wait
  EXPECT_EQ(clk.now(), t0);
  v.wait_ring_change(4, t0, clk);  // unchanged, deadline now: returns
  EXPECT_EQ(clk.now(), t0);
}

// A node that leaves gives up its ring at once: the ring epoch moves (a collective in flight
// compares it with its own and fails), a waiter wakes, and later views (the master's answer among
// them) are still taken but never move the ring epoch back.
TEST(node_view, leaving_moves_the_ring_epoch_away_for_good_and_wakes_a_waiter) {
  node_view v;
  manual_clock clk;
  EXPECT_TRUE(v.take(view_msg(4, 1, 4), true));
  EXPECT_FALSE(v.leaving());
  std::thread waiter([&] { v.wait_ring_change(4, clk.now() + std::chrono::hours(1), clk); });
  v.leave();
  waiter.join();  // woken by leave(), not by the hour on the clock
  EXPECT_TRUE(v.leaving());
  EXPECT_EQ(v.ring_epoch().load(), leaving_ring_epoch);
  EXPECT_TRUE(v.take(view_msg(5, 1, 5), false));
  EXPECT_EQ(v.view().epoch(), 5u);
  EXPECT_EQ(v.ring_epoch().load(), leaving_ring_epoch);
  EXPECT_EQ(v.view_and_ring_epoch().second, leaving_ring_epoch);
  // The view as it began to leave stays what it was (the ring's last checkpoint writer is chosen
  // from it), whatever views come after.
  EXPECT_EQ(v.view_at_leave().epoch(), 4u);
  EXPECT_NE(v.view_at_leave().find("worker-0"), nullptr);
}

TEST(node_view, before_leaving_the_view_at_leave_is_the_latest) {
  node_view v;
  EXPECT_TRUE(v.take(view_msg(2, 1, 2), true));
  EXPECT_TRUE(v.take(view_msg(3, 1, 3), true));
  EXPECT_EQ(v.view_at_leave().epoch(), 3u);
}

// A delta applies only to the view it was made from, of the same master: anything else (a view
// missed, a restarted master's sequence) is refused, and the node asks for the whole view.
TEST(node_view, a_delta_expands_only_from_its_base_view_of_the_same_master) {
  node_view v;
  const node_id w1{"worker-1", 1};
  EXPECT_TRUE(v.take(view_msg(3, 1, 3, {self, w1}), true));
  auto d = view_msg(4, 1, 4, {});
  d.view = {};
  d.epoch = 4;
  d.base_epoch = 3;
  d.gone = {w1};
  auto whole = v.expand(d);
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->epoch(), 4u);
  EXPECT_EQ(whole->members().size(), 1u);
  EXPECT_NE(whole->find("worker-0"), nullptr);
  EXPECT_EQ(v.view().epoch(), 3u) << "expanding takes nothing";
  d.base_epoch = 2;  // a view missed
  EXPECT_FALSE(v.expand(d));
  d.base_epoch = 3;
  d.master_incarnation = 2;  // another master's sequence
  EXPECT_FALSE(v.expand(d));
}

class membership_client_test : public ::testing::Test {
 protected:
  membership_client::links links() {
    return {[this](outbound&& m) -> expected<void> {
              if (!master_connected) return make_unexpected(core_errc::io_error, "not connected");
              auto msg = loopback_message(m, self);
              if (!msg) return msg.err();
              sent.push_back(std::move(*msg));
              return {};
            },
            [this] { return master_connected; }, [] { return std::string("127.0.0.1:9"); }};
  }
  std::size_t joins() const {
    std::size_t n = 0;
    for (auto& m : sent) n += m.kind() == B::JOIN;
    return n;
  }

  bool master_connected = true;
  std::vector<message> sent;
  node_view view_;
  membership_client client_{node_identity{self, cluster::node_role::worker, 0, "", "job", "job", 0},
                            "127.0.0.1:1", view_, links()};
};

TEST_F(membership_client_test, a_deferred_worker_joins_once_ready_with_its_ring_address) {
  client_.defer();
  client_.master_up();
  EXPECT_EQ(joins(), 0u) << "not ready: connects without joining";
  client_.mark_ready();
  ASSERT_EQ(joins(), 1u);
  auto j = sent.back().body().getJoin();
  EXPECT_STREQ(j.getAddress().cStr(), "127.0.0.1:1");
  EXPECT_STREQ(j.getRingAddress().cStr(), "127.0.0.1:9");
  client_.mark_ready();
  EXPECT_EQ(joins(), 1u) << "ready already";
  client_.master_up();  // a restarted master
  EXPECT_EQ(joins(), 2u);
}

TEST_F(membership_client_test, a_ready_worker_without_the_master_joins_when_it_comes_up) {
  client_.defer();
  master_connected = false;
  client_.mark_ready();
  EXPECT_EQ(joins(), 0u);
  master_connected = true;
  client_.master_up();
  EXPECT_EQ(joins(), 1u);
}

TEST_F(membership_client_test, leaving_tells_the_master_and_never_joins_again) {
  EXPECT_FALSE(client_.leaving());
  EXPECT_TRUE(client_.leave("left on SIGTERM"));
  EXPECT_TRUE(client_.leaving());
  EXPECT_TRUE(client_.leave_token().stop_requested());
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].body().getJob().which(), schema::JobMessage::NODE_EXITED);
  EXPECT_TRUE(client_.leave("again")) << "already leaving";
  EXPECT_EQ(sent.size(), 1u);
  client_.master_up();
  client_.defer();
  client_.mark_ready();
  EXPECT_EQ(joins(), 0u);
  client_.left();
  EXPECT_TRUE(client_.await_left(0ms));
}

// A delta it could not apply: a ready member joins again (the master answers with the whole view);
// a member not ready yet, or leaving, does not.
TEST_F(membership_client_test, a_member_that_missed_a_view_joins_again_for_the_whole_one) {
  client_.defer();
  client_.request_view();
  EXPECT_EQ(joins(), 0u) << "not ready: not a member";
  client_.mark_ready();
  ASSERT_EQ(joins(), 1u);
  client_.request_view();
  EXPECT_EQ(joins(), 2u);
  master_connected = false;
  client_.request_view();
  EXPECT_EQ(joins(), 2u);
  master_connected = true;
  EXPECT_TRUE(client_.leave("left on SIGTERM"));
  client_.request_view();
  EXPECT_EQ(joins(), 2u) << "a leaving node never joins again";
}

TEST_F(membership_client_test, a_master_lost_while_leaving_ends_the_wait_unanswered) {
  EXPECT_TRUE(client_.leave("left on SIGTERM"));
  client_.master_down();
  EXPECT_FALSE(client_.await_left(10s));  // returns at once: the master is gone
}

TEST_F(membership_client_test, without_the_master_a_leave_cannot_be_told) {
  master_connected = false;
  EXPECT_FALSE(client_.leave("left on SIGTERM"));
  EXPECT_TRUE(client_.leaving());
  EXPECT_TRUE(sent.empty());
}

// A newer inject replaces an older one whose reset is pending: the older reset must not clear
// the newer fault (it did: replacing the reset thread woke it, and it cleared what was just set).
TEST(fault_injector, a_newer_inject_outlives_the_older_ones_reset) {
  std::mutex mu;
  std::vector<fault_injection> applied;
  {
    fault_injector inj([&](const fault_injection& f) {
      std::lock_guard lk(mu);
      applied.push_back(f);
    });
    inj.inject({0.5, 1ms}, 1h);
    inj.inject({1.0, 2ms}, 1h);
    std::lock_guard lk(mu);
    ASSERT_EQ(applied.size(), 3u);  // the first, its reset ended early, the second
    EXPECT_EQ(applied[1].drop_probability, 0.0);
    EXPECT_EQ(applied.back().drop_probability, 1.0);
    EXPECT_EQ(applied.back().delay, 2ms);
  }
  // Destroyed: the pending reset ends early and clears the fault.
  ASSERT_EQ(applied.size(), 4u);
  EXPECT_EQ(applied.back().drop_probability, 0.0);
  EXPECT_EQ(applied.back().delay, 0us);
}

}  // namespace
}  // namespace troupe::actors
