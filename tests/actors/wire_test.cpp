#include <gtest/gtest.h>

#include "ps_layout.hpp"
#include "wire.hpp"

namespace troupe::actors {
namespace {

TEST(wire, membership_round_trips_with_ring_epoch_and_pids) {
  auto v = cluster::membership_view::make({1, 4});
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->join({{"master", 2}, cluster::node_role::master, "127.0.0.1:7000", cluster::member_state::alive, 10}));
  ASSERT_TRUE(v->join({{"worker-0", 0}, cluster::node_role::worker, "127.0.0.1:7001", cluster::member_state::alive, 11}));
  ASSERT_TRUE(v->join({{"worker-1", 3}, cluster::node_role::worker, "127.0.0.1:7002", cluster::member_state::alive, 12}));
  auto out = wire::membership(*v, "test", 7, 2);
  auto m = loopback_message(out, node_id{"master", 2});
  ASSERT_TRUE(m) << m.err().to_string();
  auto back = wire::read_membership(m->body().getMembership());
  EXPECT_EQ(back.reason, "test");
  EXPECT_EQ(back.ring_epoch, 7u);
  EXPECT_EQ(back.master_incarnation, 2u);
  EXPECT_EQ(back.view.epoch(), v->epoch());
  ASSERT_EQ(back.view.members().size(), 3u);
  EXPECT_EQ(back.view.members(), v->members());
  EXPECT_EQ(back.view.worker_ring().ranks, v->worker_ring().ranks);
}

TEST(wire, list_copies) {
  outbound o;
  auto pull = o.body().initPsPull();
  std::vector<std::uint64_t> ids{5, 1, 9};
  auto refs = pull.initSparse(1);
  refs[0].setIds(kj::arrayPtr(ids.data(), ids.size()));
  std::vector<std::uint64_t> back;
  wire::to_vector(refs[0].getIds().asReader(), back);
  EXPECT_EQ(back, ids);
}

TEST(ps_layout, spreads_ids_and_names_deterministically) {
  std::vector<int> per_shard(4, 0);
  for (std::uint64_t id = 0; id < 4000; ++id) per_shard[shard_of_id(id, 4)]++;
  for (int n : per_shard) EXPECT_NEAR(n, 1000, 150);
  EXPECT_EQ(shard_of_name("fc1.w", 3), shard_of_name("fc1.w", 3));
  EXPECT_EQ(shard_of_id(42, 1), 0u);
}

}  // namespace
}  // namespace troupe::actors
