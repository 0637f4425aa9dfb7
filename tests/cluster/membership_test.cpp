#include <gtest/gtest.h>

#include "troupe/cluster/errc.hpp"
#include "troupe/cluster/membership.hpp"

namespace troupe::cluster {
namespace {

// Field by field: g++ 12 -O3 warns (falsely, -Wmaybe-uninitialized) on nested brace initialisation.
member make_member(std::string name, std::uint64_t inc, node_role role, std::string address,
                   member_state state) {
  member m;
  m.id.name = std::move(name);
  m.id.incarnation = inc;
  m.role = role;
  m.address = std::move(address);
  m.state = state;
  return m;
}

member alive(std::string name, std::uint64_t inc, node_role role, std::string address) {
  return make_member(std::move(name), inc, role, std::move(address), member_state::alive);
}

membership_view started(std::size_t min, std::size_t max) {
  auto v = membership_view::make({min, max});
  EXPECT_TRUE(v);
  EXPECT_TRUE(v->join(alive("master", 0, node_role::master, "127.0.0.1:7000")));
  return *v;
}

TEST(membership, roles_round_trip) {
  for (auto r : {node_role::master, node_role::dispenser, node_role::ps, node_role::worker}) {
    auto back = parse_role(to_string(r));
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, r);
  }
  auto bad = parse_role("chief");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().to_string().find("'chief'"), std::string::npos);
  EXPECT_EQ(node_name(node_role::worker, 3), "worker-3");
  EXPECT_EQ(node_name(node_role::master, 3), "master");
}

TEST(membership, addresses_are_validated) {
  EXPECT_TRUE(validate_address("127.0.0.1:7000"));
  EXPECT_TRUE(validate_address("[::1]:1"));
  for (const char* bad : {"", "127.0.0.1", ":80", "host:", "host:0", "host:65536", "host:8x"}) {
    auto r = validate_address(bad);
    EXPECT_FALSE(r) << bad;
  }
}

TEST(membership, natural_order) {
  EXPECT_TRUE(natural_less("worker-2", "worker-10"));
  EXPECT_FALSE(natural_less("worker-10", "worker-2"));
  EXPECT_TRUE(natural_less("ps-1", "worker-0"));
  EXPECT_TRUE(natural_less("worker-1", "worker-1a"));
  EXPECT_TRUE(natural_less("w1", "w01"));  // total order: equal numbers, shorter text first
  EXPECT_FALSE(natural_less("worker-3", "worker-3"));
}

TEST(membership, limits_are_checked) {
  EXPECT_FALSE(membership_view::make({3, 2}));
  EXPECT_FALSE(membership_view::make({0, 0}));
  auto v = membership_view::make({0, 4});
  ASSERT_TRUE(v);
  EXPECT_EQ(v->epoch(), 0u);
  auto e = v->set_limits({5, 4});
  ASSERT_FALSE(e);
  EXPECT_EQ(e.err(), cluster_errc::invalid_spec);
  EXPECT_EQ(v->epoch(), 0u);  // a failed mutation does not bump
  ASSERT_TRUE(v->set_limits({2, 6}));
  EXPECT_EQ(v->epoch(), 1u);
}

TEST(membership, every_change_bumps_the_epoch_once) {
  auto v = started(1, 4);
  EXPECT_EQ(v.epoch(), 1u);
  ASSERT_TRUE(v.add_launching({"worker-0", 0}, node_role::worker));
  EXPECT_EQ(v.epoch(), 2u);
  ASSERT_TRUE(v.join(alive("worker-0", 0, node_role::worker, "127.0.0.1:7001")));
  EXPECT_EQ(v.epoch(), 3u);
  ASSERT_TRUE(v.join(alive("worker-1", 0, node_role::worker, "127.0.0.1:7002")));
  ASSERT_TRUE(v.begin_leave("worker-1"));
  EXPECT_EQ(v.find("worker-1")->state, member_state::leaving);
  EXPECT_EQ(v.epoch(), 5u);
  ASSERT_TRUE(v.remove({"worker-1", 0}));
  EXPECT_EQ(v.epoch(), 6u);
  EXPECT_EQ(v.find("worker-1"), nullptr);
  // Failures leave the epoch alone.
  EXPECT_FALSE(v.remove({"worker-1", 0}));
  EXPECT_FALSE(v.join(alive("worker-0", 0, node_role::worker, "127.0.0.1:7001")));
  EXPECT_EQ(v.epoch(), 6u);
}

TEST(membership, launching_promotes_on_join_and_keeps_the_role) {
  auto v = started(0, 4);
  ASSERT_TRUE(v.add_launching({"ps-0", 0}, node_role::ps));
  EXPECT_EQ(v.find("ps-0")->state, member_state::launching);
  EXPECT_TRUE(v.find("ps-0")->address.empty());
  auto wrong = v.join(alive("ps-0", 0, node_role::worker, "127.0.0.1:7100"));
  ASSERT_FALSE(wrong);
  EXPECT_EQ(wrong.err(), cluster_errc::invalid_spec);
  ASSERT_TRUE(v.join(alive("ps-0", 0, node_role::ps, "127.0.0.1:7100")));
  EXPECT_EQ(v.find("ps-0")->state, member_state::alive);
  EXPECT_EQ(v.find("ps-0")->address, "127.0.0.1:7100");
  auto no_addr = v.join(make_member("worker-0", 0, node_role::worker, "", member_state::alive));
  ASSERT_FALSE(no_addr);
  EXPECT_EQ(no_addr.err(), cluster_errc::invalid_spec);
}

TEST(membership, max_workers_is_enforced_for_launching_and_joining) {
  auto v = started(0, 2);
  ASSERT_TRUE(v.add_launching({"worker-0", 0}, node_role::worker));
  ASSERT_TRUE(v.join(alive("worker-1", 0, node_role::worker, "127.0.0.1:7002")));
  auto over = v.add_launching({"worker-2", 0}, node_role::worker);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.err(), cluster_errc::membership_limit);
  auto over2 = v.join(alive("worker-2", 0, node_role::worker, "127.0.0.1:7003"));
  ASSERT_FALSE(over2);
  EXPECT_EQ(over2.err(), cluster_errc::membership_limit);
  // Other roles do not count against the worker limit.
  EXPECT_TRUE(v.add_launching({"ps-0", 0}, node_role::ps));
  // The launching worker's slot is its own.
  EXPECT_TRUE(v.join(alive("worker-0", 0, node_role::worker, "127.0.0.1:7001")));
}

TEST(membership, min_workers_blocks_leaving_but_not_dying) {
  auto v = started(2, 4);
  ASSERT_TRUE(v.join(alive("worker-0", 0, node_role::worker, "127.0.0.1:7001")));
  ASSERT_TRUE(v.join(alive("worker-1", 0, node_role::worker, "127.0.0.1:7002")));
  auto r = v.begin_leave("worker-1");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), cluster_errc::membership_limit);
  EXPECT_EQ(v.begin_leave("worker-7").err(), cluster_errc::no_such_node);
  EXPECT_EQ(v.worker_deficit(), 0u);
  ASSERT_TRUE(v.remove({"worker-1", 0}));  // a death
  EXPECT_EQ(v.worker_deficit(), 1u);
  ASSERT_TRUE(v.add_launching({"worker-1", 1}, node_role::worker));
  EXPECT_EQ(v.worker_deficit(), 0u);
}

TEST(membership, incarnations_replace_and_stale_ones_are_refused) {
  auto v = started(0, 4);
  ASSERT_TRUE(v.join(alive("worker-3", 1, node_role::worker, "127.0.0.1:7003")));
  EXPECT_EQ(v.next_incarnation("worker-3"), 2u);
  EXPECT_EQ(v.next_incarnation("worker-9"), 0u);
  // An older incarnation is stale.
  auto old = v.join(alive("worker-3", 0, node_role::worker, "127.0.0.1:7003"));
  ASSERT_FALSE(old);
  EXPECT_EQ(old.err(), cluster_errc::stale_incarnation);
  EXPECT_EQ(v.remove({"worker-3", 0}).err(), cluster_errc::stale_incarnation);
  // A newer incarnation replaces the member in place (a restart that beat the death notice).
  ASSERT_TRUE(v.join(alive("worker-3", 2, node_role::worker, "127.0.0.1:7009")));
  EXPECT_EQ(v.find("worker-3")->id.incarnation, 2u);
  EXPECT_EQ(v.worker_slots(), 1u);
  // After a death, the dead incarnation cannot come back, but the next one can.
  ASSERT_TRUE(v.remove({"worker-3", 2}));
  EXPECT_EQ(v.join(alive("worker-3", 2, node_role::worker, "127.0.0.1:7009")).err(),
            cluster_errc::stale_incarnation);
  EXPECT_EQ(v.add_launching({"worker-3", 2}, node_role::worker).err(), cluster_errc::stale_incarnation);
  EXPECT_TRUE(v.add_launching({"worker-3", v.next_incarnation("worker-3")}, node_role::worker));
}

// Restarts are the highest incarnations summed, dead names included. After a mark the view keeps
// the members that change as they were, so the diff since the mark is the diff from a copy taken
// then (the master's deltas), and at_mark() tells what each member looked like.
TEST(membership, restarts_sum_the_highest_incarnations_and_the_diff_since_a_mark_is_the_diff_from_then) {
  auto v = started(0, 4);
  ASSERT_TRUE(v.join(alive("master", 3, node_role::master, "127.0.0.1:7000")));
  ASSERT_TRUE(v.join(alive("worker-0", 2, node_role::worker, "127.0.0.1:7001")));
  ASSERT_TRUE(v.join(alive("worker-1", 0, node_role::worker, "127.0.0.1:7002")));
  ASSERT_TRUE(v.join(alive("ps-0", 1, node_role::ps, "127.0.0.1:7100")));
  EXPECT_EQ(v.restarts(), 6u);
  EXPECT_EQ(v.restarts("master"), 3u);
  EXPECT_EQ(v.mark_epoch(), 0u);
  v.mark();
  const auto base = v;
  EXPECT_EQ(v.mark_epoch(), v.epoch());
  EXPECT_TRUE(v.diff_since_mark().empty());
  EXPECT_FALSE(v.ring_changed_since_mark());
  ASSERT_TRUE(v.add_launching({"worker-3", 0}, node_role::worker));
  EXPECT_FALSE(v.ring_changed_since_mark()) << "a launching worker is in no ring";
  ASSERT_TRUE(v.remove({"worker-3", 0}));
  EXPECT_FALSE(v.ring_changed_since_mark());
  ASSERT_TRUE(v.remove({"worker-0", 2}));
  EXPECT_TRUE(v.ring_changed_since_mark());
  EXPECT_EQ(v.restarts("master"), 3u) << "a dead node's restarts still count";
  EXPECT_EQ(v.next_incarnation("worker-0"), 3u);
  ASSERT_TRUE(v.join(alive("worker-2", 0, node_role::worker, "127.0.0.1:7003")));
  ASSERT_TRUE(v.begin_leave("worker-1"));
  ASSERT_TRUE(v.add_launching({"worker-0", 3}, node_role::worker));  // the dead one restarted
  ASSERT_TRUE(v.join(alive("worker-0", 3, node_role::worker, "127.0.0.1:7004")));
  EXPECT_EQ(v.restarts(), 7u);
  EXPECT_TRUE(v.ring_changed_since_mark());
  EXPECT_FALSE(same_ring(base.worker_ring(), v.worker_ring()));
  const auto want = diff(base, v);
  const auto got = v.diff_since_mark();
  EXPECT_EQ(got.left, want.left);
  EXPECT_EQ(got.joined, want.joined);
  EXPECT_EQ(got.changed, want.changed);
  ASSERT_EQ(got.left.size(), 1u);
  EXPECT_EQ(got.left[0].id, (node_id{"worker-0", 2}));
  ASSERT_EQ(got.joined.size(), 2u);
  ASSERT_EQ(got.changed.size(), 1u);
  EXPECT_EQ(got.changed[0].second.state, member_state::leaving);
  auto at_mark = [&](const char* name) { return v.at_mark(*v.find(name)); };
  ASSERT_NE(at_mark("worker-0"), nullptr);
  EXPECT_EQ(at_mark("worker-0")->id, (node_id{"worker-0", 2}));
  EXPECT_EQ(at_mark("worker-1")->state, member_state::alive);
  EXPECT_EQ(at_mark("worker-2"), nullptr);
  EXPECT_EQ(at_mark("ps-0"), v.find("ps-0"));
  // A view built from changes (a worker's) tracks nothing; a new mark starts from empty.
  auto w = v.with_changes(v.epoch() + 1, {}, {});
  ASSERT_TRUE(w);
  EXPECT_EQ(w->mark_epoch(), 0u);
  v.mark();
  EXPECT_TRUE(v.diff_since_mark().empty());
  EXPECT_EQ(at_mark("worker-2"), v.find("worker-2"));
  // A PS change moves no ring.
  ASSERT_TRUE(v.remove({"ps-0", 1}));
  EXPECT_FALSE(v.ring_changed_since_mark());
  // A worker's new incarnation in its place is another rank, the same name.
  ASSERT_TRUE(v.join(alive("worker-2", 1, node_role::worker, "127.0.0.1:7005")));
  EXPECT_TRUE(v.ring_changed_since_mark());
}

TEST(membership, ring_is_alive_workers_in_stable_natural_order) {
  auto v = started(0, 16);
  for (int i : {10, 2, 7, 1})
    ASSERT_TRUE(v.join(
        alive("worker-" + std::to_string(i), 0, node_role::worker, "127.0.0.1:" + std::to_string(7000 + i))));
  ASSERT_TRUE(v.add_launching({"worker-3", 0}, node_role::worker));
  ASSERT_TRUE(v.join(alive("ps-0", 0, node_role::ps, "127.0.0.1:7100")));
  auto r = v.worker_ring();
  EXPECT_EQ(r.epoch, v.epoch());
  ASSERT_EQ(r.size(), 4u);
  std::vector<std::string> names;
  for (auto& id : r.ranks) names.push_back(id.name);
  EXPECT_EQ(names, (std::vector<std::string>{"worker-1", "worker-2", "worker-7", "worker-10"}));
  EXPECT_EQ(r.rank_of("worker-7"), 2u);
  EXPECT_EQ(r.rank_of("worker-3"), std::nullopt);  // launching: not in the ring
  EXPECT_EQ(r.next(3), 0u);
  EXPECT_EQ(r.prev(0), 3u);

  // Survivors keep their relative order; a joiner slots in by name.
  ASSERT_TRUE(v.remove({"worker-2", 0}));
  ASSERT_TRUE(v.join(alive("worker-3", 0, node_role::worker, "127.0.0.1:7003")));
  auto r2 = v.worker_ring();
  names.clear();
  for (auto& id : r2.ranks) names.push_back(id.name);
  EXPECT_EQ(names, (std::vector<std::string>{"worker-1", "worker-3", "worker-7", "worker-10"}));
  EXPECT_GT(r2.epoch, r.epoch);
  EXPECT_FALSE(same_ring(r, r2));

  // A change that does not touch alive workers keeps the same ring under a new epoch.
  ASSERT_TRUE(v.add_launching({"ps-1", 0}, node_role::ps));
  auto r3 = v.worker_ring();
  EXPECT_TRUE(same_ring(r2, r3));
  EXPECT_NE(r2.epoch, r3.epoch);
  // A leaving worker is out of the ring.
  ASSERT_TRUE(v.begin_leave("worker-10"));
  EXPECT_EQ(v.worker_ring().size(), 3u);
}

TEST(membership, two_nodes_compute_the_same_ring_from_copies) {
  auto v = started(0, 8);
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(v.join(
        alive("worker-" + std::to_string(i), 0, node_role::worker, "127.0.0.1:800" + std::to_string(i))));
  membership_view copy = v;
  EXPECT_EQ(copy, v);
  EXPECT_TRUE(same_ring(copy.worker_ring(), v.worker_ring()));
}

TEST(membership, surplus_workers_are_the_last_ranks) {
  auto v = started(0, 8);
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(v.join(
        alive("worker-" + std::to_string(i), 0, node_role::worker, "127.0.0.1:800" + std::to_string(i))));
  auto s = v.surplus_workers(2);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].name, "worker-2");
  EXPECT_EQ(s[1].name, "worker-3");
  EXPECT_TRUE(v.surplus_workers(4).empty());
  EXPECT_EQ(v.free_index(node_role::worker), 4u);
  ASSERT_TRUE(v.remove({"worker-1", 0}));
  EXPECT_EQ(v.free_index(node_role::worker), 1u);
}

TEST(membership, diff_reports_joins_leaves_and_changes) {
  auto a = started(0, 8);
  ASSERT_TRUE(a.join(alive("worker-0", 0, node_role::worker, "127.0.0.1:7001")));
  ASSERT_TRUE(a.join(alive("worker-1", 0, node_role::worker, "127.0.0.1:7002")));
  ASSERT_TRUE(a.join(alive("worker-2", 0, node_role::worker, "127.0.0.1:7003")));
  auto b = a;
  EXPECT_TRUE(diff(a, b).empty());
  ASSERT_TRUE(b.remove({"worker-0", 0}));                                          // left
  ASSERT_TRUE(b.join(alive("worker-1", 1, node_role::worker, "127.0.0.1:7012")));  // replaced
  ASSERT_TRUE(b.begin_leave("worker-2"));                                          // changed
  ASSERT_TRUE(b.add_launching({"worker-5", 0}, node_role::worker));                // joined
  auto d = diff(a, b);
  ASSERT_EQ(d.left.size(), 2u);
  EXPECT_EQ(d.left[0].id, (node_id{"worker-0", 0}));
  EXPECT_EQ(d.left[1].id, (node_id{"worker-1", 0}));
  ASSERT_EQ(d.joined.size(), 2u);
  EXPECT_EQ(d.joined[0].id, (node_id{"worker-1", 1}));
  EXPECT_EQ(d.joined[1].id, (node_id{"worker-5", 0}));
  ASSERT_EQ(d.changed.size(), 1u);
  EXPECT_EQ(d.changed[0].first.state, member_state::alive);
  EXPECT_EQ(d.changed[0].second.state, member_state::leaving);
  // The reverse diff swaps joined and left.
  auto r = diff(b, a);
  EXPECT_EQ(r.joined.size(), 2u);
  EXPECT_EQ(r.left.size(), 2u);
}

TEST(membership, restore_validates_and_keeps_the_epoch) {
  std::vector<member> ms = {alive("worker-10", 0, node_role::worker, "127.0.0.1:7010"),
                            alive("master", 2, node_role::master, "127.0.0.1:7000"),
                            make_member("worker-2", 3, node_role::worker, "", member_state::launching)};
  auto v = membership_view::restore(41, {1, 4}, ms);
  ASSERT_TRUE(v) << v.err().to_string();
  EXPECT_EQ(v->epoch(), 41u);
  EXPECT_EQ(v->members()[0].id.name, "master");
  EXPECT_EQ(v->members()[1].id.name, "worker-2");
  EXPECT_EQ(v->next_incarnation("worker-2"), 4u);
  EXPECT_NE(v->to_string().find("epoch 41, workers 1..4: master#2 alive 127.0.0.1:7000"), std::string::npos)
      << v->to_string();

  ms.push_back(alive("master", 3, node_role::master, "127.0.0.1:7000"));
  EXPECT_EQ(membership_view::restore(41, {1, 4}, ms).err(), cluster_errc::already_exists);
  ms.pop_back();
  ms.push_back(alive("ps-0", 0, node_role::ps, "nowhere"));
  auto bad = membership_view::restore(41, {1, 4}, ms);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.err().to_string().find("ps-0#0"), std::string::npos) << bad.err().to_string();
  EXPECT_FALSE(membership_view::restore(1, {5, 4}, {}));
}

// What a membership delta applies: removals only of the incarnation named, members added in natural
// order or replacing the member of their name, bad members refused; the view itself is unchanged.
TEST(membership, with_changes_removes_replaces_and_inserts_in_order) {
  auto v = started(1, 8);
  for (int i : {1, 2, 3})
    ASSERT_TRUE(v.join(alive("worker-" + std::to_string(i), 1, node_role::worker, "127.0.0.1:7001")));
  const auto before = v;
  auto w = v.with_changes(v.epoch() + 5, {node_id{"worker-1", 1}, node_id{"worker-2", 0}},
                          {alive("worker-10", 1, node_role::worker, "127.0.0.1:7010"),
                           alive("worker-3", 2, node_role::worker, "127.0.0.1:7013"),
                           alive("worker-0", 1, node_role::worker, "127.0.0.1:7020")});
  ASSERT_TRUE(w) << w.err().to_string();
  EXPECT_EQ(v, before);
  EXPECT_EQ(w->epoch(), v.epoch() + 5);
  std::vector<std::string> names;
  for (const auto& m : w->members()) names.push_back(m.id.to_string());
  // worker-2#0 is not the member (worker-2#1 is): it stays.
  EXPECT_EQ(names,
            (std::vector<std::string>{"master#0", "worker-0#1", "worker-2#1", "worker-3#2", "worker-10#1"}));
  EXPECT_EQ(w->next_incarnation("worker-3"), 3u);
  ASSERT_NE(w->find("worker-10"), nullptr);
  EXPECT_EQ(w->find("worker-1"), nullptr);
  EXPECT_FALSE(v.with_changes(v.epoch() + 1, {}, {alive("worker-9", 0, node_role::worker, "nowhere")}));
}

// find() is a binary search over the natural order: every member of a large view is found.
TEST(membership, find_locates_every_member_of_a_large_view) {
  std::vector<member> ms;
  for (int i = 999; i >= 0; --i)
    ms.push_back(alive("worker-" + std::to_string(i), 0, node_role::worker, "127.0.0.1:7001"));
  ms.push_back(alive("ps-0", 0, node_role::ps, "127.0.0.1:7000"));
  auto v = membership_view::restore(3, {1, 1000}, ms);
  ASSERT_TRUE(v) << v.err().to_string();
  for (int i = 0; i < 1000; ++i) ASSERT_NE(v->find("worker-" + std::to_string(i)), nullptr) << i;
  EXPECT_NE(v->find("ps-0"), nullptr);
  EXPECT_EQ(v->find("worker-1000"), nullptr);
  EXPECT_EQ(v->find("worker-01"), nullptr);
  EXPECT_EQ(v->worker_ring().ranks.front().name, "worker-0");
}

}  // namespace
}  // namespace troupe::cluster
