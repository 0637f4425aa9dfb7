// The GPU communicator rendezvous: the master's per-ring-epoch store, and the relay of a unique id
// (opaque bytes: no GPU needed) from rank 0 to the other ranks through a real master actor over
// the transport on loopback.
#include <gtest/gtest.h>
#include <unistd.h>

#include <caf/all.hpp>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <thread>

#include "master/gpu_rendezvous.hpp"
#include "node/node_runtime.hpp"
#include "roles.hpp"
#include "troupe/wire/messages.hpp"
#include "worker/gpu_comm_client.hpp"

namespace troupe::actors {
namespace {

std::string opaque_id(char seed) {
  std::string id(wire::gpu_unique_id_bytes, '\0');
  for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(seed + i * 13);
  return id;
}

wire::gpu_comm_post make_post(std::uint64_t epoch, std::uint32_t rank, std::uint32_t ranks,
                              std::string id = "") {
  return {epoch,
          ranks,
          {rank, "worker-" + std::to_string(rank), "host", "GPU-" + std::to_string(rank)},
          std::move(id)};
}

TEST(gpu_rendezvous, collects_every_rank_and_keeps_the_first_unique_id) {
  gpu_rendezvous r;
  auto s = r.add(make_post(4, 1, 2));
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_FALSE(s->complete());
  EXPECT_TRUE(s->unique_id.empty());
  s = r.add(make_post(4, 0, 2, opaque_id('a')));
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_TRUE(s->complete());
  EXPECT_EQ(s->unique_id, opaque_id('a'));
  ASSERT_EQ(s->posted.size(), 2u);
  EXPECT_EQ(s->posted[1].device_uuid, "GPU-1");
  // A restarted rank 0 posting another id adopts the first one.
  s = r.add(make_post(4, 0, 2, opaque_id('b')));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->unique_id, opaque_id('a'));
}

TEST(gpu_rendezvous, refuses_bad_posts_naming_the_problem) {
  gpu_rendezvous r;
  auto err = [&](const wire::gpu_comm_post& p) {
    auto s = r.add(p);
    return s ? std::string("accepted") : s.err().to_string();
  };
  EXPECT_NE(err(make_post(1, 2, 2)).find("rank 2 outside a ring of 2"), std::string::npos);
  EXPECT_NE(err(make_post(1, 0, 0)).find("ring size 0"), std::string::npos);
  EXPECT_NE(err(make_post(1, 1, 2, opaque_id('a'))).find("only rank 0"), std::string::npos);
  EXPECT_NE(err(make_post(1, 0, 2, "short")).find("unique id of 5 bytes"), std::string::npos);
  auto p = make_post(1, 0, 2);
  p.who.host = std::string(1000, 'h');
  EXPECT_NE(err(p).find("host longer than"), std::string::npos);
  ASSERT_TRUE(r.add(make_post(1, 0, 2)));
  EXPECT_NE(err(make_post(1, 1, 3)).find("has 2 ranks, the post says 3"), std::string::npos);
}

TEST(gpu_rendezvous, forgets_old_epochs_and_refuses_them_as_stale) {
  gpu_rendezvous r;
  for (std::uint64_t e = 1; e <= 10; ++e) ASSERT_TRUE(r.add(make_post(e, 0, 1)));
  EXPECT_LE(r.epochs_kept(), gpu_rendezvous::max_epochs);
  r.forget_before(9);
  EXPECT_EQ(r.epochs_kept(), 2u);
  auto stale = r.add(make_post(8, 0, 1));
  ASSERT_FALSE(stale);
  EXPECT_NE(stale.err().to_string().find("stale ring epoch 8 (current 9)"), std::string::npos);
  EXPECT_FALSE(r.get(3));
  auto s = r.get(10);
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->complete());
  auto none = r.get(11);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->ranks, 0u);
}

TEST(gpu_rendezvous, wire_round_trip) {
  outbound o;
  auto p = make_post(7, 0, 3, opaque_id('z'));
  auto job = o.body().initJob();
  wire::write_gpu_post(job.initGpuCommPost(), p);
  auto back = wire::read_gpu_post(job.getGpuCommPost().asReader());
  EXPECT_EQ(back.ring_epoch, 7u);
  EXPECT_EQ(back.ranks, 3u);
  EXPECT_EQ(back.who, p.who);
  EXPECT_EQ(back.unique_id, p.unique_id);
  gpu_rendezvous r;
  outbound o2;
  auto info = o2.body().initJob().initGpuCommInfo();
  wire::write_gpu_info(info, r.add(p));
  auto s = wire::read_gpu_info(info.asReader());
  ASSERT_TRUE(s) << s.err().to_string();
  EXPECT_EQ(s->unique_id, p.unique_id);
  ASSERT_EQ(s->posted.size(), 1u);
  EXPECT_EQ(s->posted[0], p.who);
  outbound o3;
  auto bad = o3.body().initJob().initGpuCommInfo();
  wire::write_gpu_info(bad, r.add(make_post(7, 5, 3)));
  EXPECT_FALSE(wire::read_gpu_info(bad.asReader()));
}

// A worker-like client: its own endpoint connected to the master, the membership it receives.
struct client {
  std::unique_ptr<endpoint> net;
  std::unique_ptr<wire::rpc_client> rpc;
  std::mutex mu;
  std::uint64_t ring_epoch = 0;

  client(const std::string& name, const std::string& token, const std::string& master) {
    transport_config cfg;
    cfg.token = token;
    auto n = endpoint::create(node_id{name, 1}, cfg);
    if (!n) throw std::runtime_error(n.err().to_string());
    net = std::move(*n);
    (void)net->register_name("node", [this](const message& m) {
      wire::guarded("membership", [&] {
        auto v = wire::read_membership(m.body().getMembership());
        std::lock_guard lk(mu);
        ring_epoch = std::max(ring_epoch, v.ring_epoch);
      });
    });
    if (auto c = net->connect(master, false); !c) throw std::runtime_error(c.err().to_string());
    auto r = wire::rpc_client::create(*net, "gpu");
    if (!r) throw std::runtime_error(r.err().to_string());
    rpc = std::move(*r);
    if (auto j = net->send("master", "master",
                           wire::join(node_id{name, 1}, cluster::node_role::worker, "127.0.0.1:1",
                                      static_cast<int>(::getpid())));
        !j)
      throw std::runtime_error(j.err().to_string());
  }
  ~client() {
    rpc.reset();
    net.reset();
  }
  // Waits until the master's ring epoch includes `workers` joins (it grows with each).
  std::uint64_t wait_ring_epoch(std::uint64_t above) {
    for (int i = 0; i < 500; ++i) {
      {
        std::lock_guard lk(mu);
        if (ring_epoch > above) return ring_epoch;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }
};

// A master node's runtime (no roles yet) for job `job` in `dir` (made, with the token file), its
// job file an allreduce job plus `extra` TOML, listening on a free loopback port.
expected<std::unique_ptr<node_runtime>> start_master_node(const std::filesystem::path& dir,
                                                          const std::string& token, const std::string& job,
                                                          const std::string& extra) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << token;
  auto doc = config_doc::from_string("[job]\nstrategy = \"allreduce\"\n" + extra);
  if (!doc) return doc.err();
  auto spec = job::job_spec::read(*doc);
  if (!spec) return spec.err();
  node_runtime::identity who;
  who.id = {"master", 1};
  who.role = cluster::node_role::master;
  who.job_dir = dir.string();
  who.job_id = job;
  return node_runtime::start(*spec, who, "127.0.0.1:0");
}

class master_relay : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("troupe_gpu_relay_" + std::to_string(::getpid()));
    auto rt = start_master_node(dir_, token_, "relay", "[transport]\nheartbeat_ms = 200\n");
    ASSERT_TRUE(rt) << rt.err().to_string();
    rt_ = std::move(*rt);
    ASSERT_TRUE(rt_->bridge("master"));
    master_ = spawn_master(rt_->system(), *rt_, rt_->names(), 0);
    rt_->names().put("master", master_);
  }
  void TearDown() override {
    clients_.clear();
    if (master_) caf::anon_send_exit(master_, caf::exit_reason::user_shutdown);
    master_ = nullptr;
    rt_.reset();
    std::filesystem::remove_all(dir_);
  }
  client& add_client(const std::string& name) {
    clients_.push_back(std::make_unique<client>(name, token_, rt_->address()));
    return *clients_.back();
  }
  // Whether the master (as `c` fetches it) holds rank `rank`'s post for ring epoch `epoch`; polled
  // until it does or 5 s pass. The event a test waits on before the next step, not a fixed sleep.
  bool wait_posted(client& c, std::uint64_t epoch, std::uint32_t rank) {
    for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
         std::chrono::steady_clock::now() < until;
         std::this_thread::sleep_for(std::chrono::milliseconds(10))) {
      auto o = wire::job();
      o.body.initGpuCommFetch().setRingEpoch(epoch);
      auto reply = c.rpc->call({"master", "master", std::move(o.out)}, std::chrono::milliseconds(1000));
      if (!reply) continue;
      bool has = false;
      wire::guarded("gpu comm info", [&] {
        auto j = reply->body().getJob();
        if (j.which() != schema::JobMessage::GPU_COMM_INFO) return;
        auto snap = wire::read_gpu_info(j.getGpuCommInfo());
        if (snap)
          for (const auto& p : snap->posted) has = has || p.rank == rank;
      });
      if (has) return true;
    }
    return false;
  }
  std::filesystem::path dir_;
  std::string token_ = "relay-test-token";
  std::unique_ptr<node_runtime> rt_;
  caf::actor master_;
  std::vector<std::unique_ptr<client>> clients_;
};

TEST_F(master_relay, rank0s_unique_id_reaches_every_rank_and_old_epochs_are_refused) {
  auto& a = add_client("worker-0");
  std::uint64_t e1 = a.wait_ring_epoch(0);
  ASSERT_NE(e1, 0u) << "no membership from the master";
  auto& b = add_client("worker-1");
  std::uint64_t e2 = b.wait_ring_epoch(e1 - 1);
  ASSERT_GT(e2, e1) << "the second join did not make a new ring epoch";
  gpu_exchange_options o;
  o.timeout = std::chrono::milliseconds(5000);
  // Rank 1 posts first and waits for rank 0, which posts its id once the master has rank 1's.
  auto rank1 =
      std::async(std::launch::async, [&] { return gpu_comm_exchange(*b.rpc, make_post(e2, 1, 2), o); });
  ASSERT_TRUE(wait_posted(a, e2, 1)) << "rank 1's post never reached the master";
  auto s0 = gpu_comm_exchange(*a.rpc, make_post(e2, 0, 2, opaque_id('q')), o);
  auto s1 = rank1.get();
  ASSERT_TRUE(s0) << s0.err().to_string();
  ASSERT_TRUE(s1) << s1.err().to_string();
  EXPECT_EQ(s1->unique_id, opaque_id('q'));
  EXPECT_EQ(s0->unique_id, opaque_id('q'));
  ASSERT_EQ(s1->posted.size(), 2u);
  EXPECT_EQ(s1->posted[0].node, "worker-0");
  EXPECT_EQ(s1->posted[1].device_uuid, "GPU-1");
  // The ring epoch before is forgotten: a late post for it is refused as stale.
  auto stale = gpu_comm_exchange(*a.rpc, make_post(e1, 0, 1, opaque_id('r')), o);
  ASSERT_FALSE(stale);
  EXPECT_NE(stale.err().to_string().find("stale ring epoch"), std::string::npos) << stale.err().to_string();
}

TEST_F(master_relay, a_restarted_master_gets_the_posts_again) {
  auto& a = add_client("worker-0");
  std::uint64_t e1 = a.wait_ring_epoch(0);
  ASSERT_NE(e1, 0u);
  auto& b = add_client("worker-1");
  std::uint64_t e2 = b.wait_ring_epoch(e1);
  ASSERT_GT(e2, e1);
  gpu_exchange_options o;
  o.timeout = std::chrono::milliseconds(5000);
  auto rank1 =
      std::async(std::launch::async, [&] { return gpu_comm_exchange(*b.rpc, make_post(e2, 1, 2), o); });
  ASSERT_TRUE(wait_posted(a, e2, 1)) << "rank 1's post never reached the first master";
  // The master actor restarts with empty state: rank 1's post is gone, and it must post again.
  caf::anon_send_exit(master_, caf::exit_reason::kill);
  master_ = spawn_master(rt_->system(), *rt_, rt_->names(), 1);
  rt_->names().put("master", master_);
  ASSERT_TRUE(wait_posted(a, e2, 1)) << "rank 1 did not post again to the restarted master";
  auto s0 = gpu_comm_exchange(*a.rpc, make_post(e2, 0, 2, opaque_id('m')), o);
  auto s1 = rank1.get();
  ASSERT_TRUE(s0) << s0.err().to_string();
  ASSERT_TRUE(s1) << s1.err().to_string();
  EXPECT_EQ(s1->unique_id, opaque_id('m'));
  EXPECT_EQ(s0->posted.size(), 2u);
}

TEST_F(master_relay, a_missing_rank_times_out_naming_it) {
  auto& a = add_client("worker-0");
  std::uint64_t e1 = a.wait_ring_epoch(0);
  ASSERT_NE(e1, 0u);
  gpu_exchange_options o;
  o.timeout = std::chrono::milliseconds(300);
  auto s = gpu_comm_exchange(*a.rpc, make_post(e1, 0, 3, opaque_id('x')), o);
  ASSERT_FALSE(s);
  EXPECT_NE(s.err().to_string().find("ranks still missing after 300 ms: 1, 2"), std::string::npos)
      << s.err().to_string();
}

}  // namespace
}  // namespace troupe::actors

namespace troupe::actors {
namespace {

// An actor that still handles a message while its node shuts down (the endpoint goes first, then
// the runtime waits for the actors) gets an error from node_runtime::send, not a freed endpoint
// (master_relay's master answered a late GpuCommPost that way and crashed the process).
TEST(node_runtime_shutdown, an_actor_sending_while_the_node_shuts_down_gets_an_error) {
  auto dir = std::filesystem::temp_directory_path() / ("troupe_rt_shutdown_" + std::to_string(::getpid()));
  auto rt = start_master_node(dir, "shutdown-test-token", "shutdown", "");
  ASSERT_TRUE(rt) << rt.err().to_string();
  auto result = std::make_shared<std::promise<std::string>>();
  auto entered = std::make_shared<std::promise<void>>();
  auto answered = result->get_future();
  auto in_handler = entered->get_future();
  node_runtime* node = rt->get();
  auto late = (*rt)->system().spawn([node, result, entered](caf::event_based_actor* self) -> caf::behavior {
    return {[=](int) {
      entered->set_value();
      // Sends until the node says it shuts down (its endpoint is gone), across the shutdown: every
      // send before gets another error (no such peer), none may touch a freed endpoint.
      std::string last = "no send";
      for (auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
           std::chrono::steady_clock::now() < until && last.find("shutting down") == std::string::npos;
           std::this_thread::sleep_for(std::chrono::milliseconds(1))) {
        auto s = node->send("worker-0", "node", outbound(), "master");
        last = s ? "sent" : s.err().to_string();
      }
      result->set_value(last);
      self->quit();
    }};
  });
  caf::anon_send(late, 1);
  ASSERT_EQ(in_handler.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  rt->reset();  // the endpoint first, then waits for the actor
  ASSERT_EQ(answered.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_NE(answered.get().find("shutting down"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace troupe::actors
