#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

#include "troupe/wire/messages.hpp"
#include "troupe/wire/ps_layout.hpp"
#include "troupe/wire/status_codec.hpp"

namespace troupe::actors {
namespace {

// Built field by field: brace-initialising the aggregate trips GCC 12's -Wmaybe-uninitialized at -O3.
cluster::member alive(const std::string& name, std::uint64_t incarnation, cluster::node_role role,
                      const std::string& address, int pid) {
  cluster::member m;
  m.id.name = name;
  m.id.incarnation = incarnation;
  m.role = role;
  m.address = address;
  m.state = cluster::member_state::alive;
  m.pid = pid;
  return m;
}

TEST(wire, membership_round_trips_with_ring_epoch_pids_and_ring_addresses) {
  auto v = cluster::membership_view::make({1, 4});
  ASSERT_TRUE(v);
  ASSERT_TRUE(v->join(alive("master", 2, cluster::node_role::master, "127.0.0.1:7000", 10)));
  auto w0 = alive("worker-0", 0, cluster::node_role::worker, "10.78.0.11:7001", 11);
  w0.ring_address = "10.78.0.11:41234";
  ASSERT_TRUE(v->join(w0));
  ASSERT_TRUE(v->join(alive("worker-1", 3, cluster::node_role::worker, "127.0.0.1:7002", 12)));
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

// A delta from one view to a later one (a death, a replaced incarnation, a join, a state change)
// crosses the wire as the changes only and expands to the later view exactly.
TEST(wire, a_membership_delta_expands_to_the_later_view) {
  auto from = cluster::membership_view::make({1, 8});
  ASSERT_TRUE(from);
  ASSERT_TRUE(from->join(alive("master", 2, cluster::node_role::master, "127.0.0.1:7000", 10)));
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(from->join(alive("worker-" + std::to_string(i), 1, cluster::node_role::worker,
                                 "127.0.0.1:" + std::to_string(7001 + i), 11 + i)));
  auto to = *from;
  ASSERT_TRUE(to.remove(node_id{"worker-1", 1}));                                                 // died
  ASSERT_TRUE(to.join(alive("worker-2", 2, cluster::node_role::worker, "127.0.0.1:7102", 22)));   // replaced
  ASSERT_TRUE(to.join(alive("worker-10", 1, cluster::node_role::worker, "127.0.0.1:7110", 30)));  // joined
  ASSERT_TRUE(to.begin_leave("worker-3"));                                                        // leaving
  auto out = wire::membership_delta(*from, to, "changes", 9, 2);
  auto m = loopback_message(out, node_id{"master", 2});
  ASSERT_TRUE(m) << m.err().to_string();
  auto d = wire::read_membership(m->body().getMembership());
  ASSERT_TRUE(d.delta());
  EXPECT_EQ(d.base_epoch, from->epoch());
  EXPECT_EQ(d.epoch, to.epoch());
  EXPECT_EQ(d.ring_epoch, 9u);
  EXPECT_EQ(d.gone.size(), 2u);     // worker-1#1, worker-2#1
  EXPECT_EQ(d.changed.size(), 3u);  // worker-2#2, worker-10#1, worker-3 leaving
  auto whole = wire::expand_delta(*from, d);
  ASSERT_TRUE(whole) << whole.err().to_string();
  EXPECT_EQ(whole->epoch(), to.epoch());
  EXPECT_EQ(whole->members(), to.members());  // in natural order: worker-10 after worker-3
  EXPECT_EQ(whole->worker_ring().ranks, to.worker_ring().ranks);
  // A node holding another view cannot take it.
  EXPECT_FALSE(wire::expand_delta(to, d));
  // A whole view of the same change is the size of the view; the delta the size of the change.
  EXPECT_LT(out.size_bytes(), wire::membership(to, "changes", 9, 2).size_bytes());
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

TEST(status_codec, a_job_status_round_trips_and_prints_the_status_json) {
  wire::job_status s;
  s.job_id = "ctr-1";
  s.epoch = 9;
  s.master_incarnation = 2;
  s.workers_alive = 3;
  s.workers_target = 4;
  s.ps_alive = 2;
  s.tasks.todo = 5;
  s.tasks.doing = 2;
  s.tasks.done = 30;
  s.tasks.failed = 1;
  s.tasks.requeued = 6;
  s.tasks.data_epoch = 1;
  s.tasks.data_epochs = 3;
  s.fault = "storage: no space left on device: /j/journal (commit)";
  s.notice = "the ring starts again from its checkpoint of step 40: ... 3 DONE task(s) are trained again";
  s.samples_per_sec = 1234.5;
  s.loss = 0.25;
  s.samples_total = 99;
  s.restarts = 7;
  s.finished = true;
  s.result_json = R"({"test_auc":0.75})";
  s.members.push_back(alive("worker-0", 3, cluster::node_role::worker, "127.0.0.1:7001", 11));
  auto o = wire::job();
  wire::write_job_status(o.body.initJobStatus(), s);
  auto m = loopback_message(o.out, node_id{"runner", 1});
  ASSERT_TRUE(m) << m.err().to_string();
  auto back = wire::read_job_status(m->body().getJob().getJobStatus());
  EXPECT_EQ(back.job_id, s.job_id);
  EXPECT_EQ(back.epoch, 9u);
  EXPECT_EQ(back.master_incarnation, 2u);
  EXPECT_EQ(back.workers_target, 4u);
  EXPECT_EQ(back.tasks.done, 30u);
  EXPECT_EQ(back.tasks.failed, 1u);
  EXPECT_EQ(back.tasks.requeued, 6u);
  EXPECT_EQ(back.tasks.data_epochs, 3u);
  EXPECT_EQ(back.tasks.total(), 38u);
  EXPECT_FALSE(back.tasks.all_over());
  EXPECT_EQ(back.restarts, 7u);
  EXPECT_EQ(back.fault, s.fault);
  EXPECT_EQ(back.notice, s.notice);
  EXPECT_EQ(back.members, s.members);
  auto j = to_json(back);
  EXPECT_EQ(j["job"], "ctr-1");
  EXPECT_EQ(j["membership_epoch"], 9);
  EXPECT_EQ(j["fault"], s.fault);
  EXPECT_EQ(j["notice"], s.notice);
  EXPECT_FALSE(to_json(wire::job_status{}).contains("notice")) << "absent until there is one";
  EXPECT_EQ(j["loss"], 0.25);
  EXPECT_EQ(j["tasks"]["todo"], 5);
  EXPECT_EQ(j["tasks"]["requeued"], 6);
  EXPECT_EQ(j["data_epoch"], 1);
  EXPECT_EQ(j["workers_target"], 4);
  EXPECT_EQ(j["samples_total"], 99);
  EXPECT_EQ(j["restarts"], 7);
  EXPECT_EQ(j["result"]["test_auc"], 0.75);
  ASSERT_EQ(j["members"].size(), 1u);
  EXPECT_EQ(j["members"][0]["node"], "worker-0#3");
  EXPECT_EQ(j["members"][0]["role"], "worker");
  EXPECT_EQ(j["members"][0]["state"], "alive");
  EXPECT_EQ(j["members"][0]["pid"], 11);
}

// |G|^2 at its floor 0: the noise scale is infinite; the wire carries it, the JSON (which has no
// infinity) says so in a field of its own. Before 2026-12-01 the worker sent 0: "no noise at all".
TEST(status_codec, an_infinite_noise_scale_travels_and_reads_as_infinite_in_json) {
  wire::job_status s;
  s.goodput.valid = true;
  s.goodput.noise_scale = std::numeric_limits<double>::infinity();
  s.goodput.rounds = 43;
  auto o = wire::job();
  wire::write_job_status(o.body.initJobStatus(), s);
  auto m = loopback_message(o.out, node_id{"runner", 1});
  ASSERT_TRUE(m) << m.err().to_string();
  auto back = wire::read_job_status(m->body().getJob().getJobStatus());
  EXPECT_TRUE(std::isinf(back.goodput.noise_scale));
  auto j = to_json(back.goodput);
  EXPECT_TRUE(j["noise_scale"].is_null()) << j.dump();
  EXPECT_TRUE(j["noise_scale_infinite"].get<bool>());
  back.goodput.noise_scale = 256;
  j = to_json(back.goodput);
  EXPECT_EQ(j["noise_scale"], 256.0);
  EXPECT_FALSE(j["noise_scale_infinite"].get<bool>());
  // No estimate yet (rounds 0): null, not the report's 0 ("no noise at all").
  back.goodput.noise_scale = 0;
  back.goodput.rounds = 0;
  j = to_json(back.goodput);
  EXPECT_TRUE(j["noise_scale"].is_null()) << j.dump();
  EXPECT_FALSE(j["noise_scale_infinite"].get<bool>());
}

TEST(ps_layout, spreads_ids_and_names_deterministically) {
  std::vector<int> per_shard(4, 0);
  for (std::uint64_t id = 0; id < 4000; ++id) per_shard[wire::shard_of_id(id, 4)]++;
  for (int n : per_shard) EXPECT_NEAR(n, 1000, 150);
  EXPECT_EQ(wire::shard_of_name("fc1.w", 3), wire::shard_of_name("fc1.w", 3));
  EXPECT_EQ(wire::shard_of_id(42, 1), 0u);
}

}  // namespace
}  // namespace troupe::actors
