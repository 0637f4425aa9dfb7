#include "troupe/transport/endpoint.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "endpoint_testing.hpp"
#include "troupe/transport/diag.hpp"
#include "troupe/transport/errc.hpp"
#include "troupe/transport/message.hpp"

namespace troupe {
namespace {
using namespace std::chrono_literals;

transport_config test_config(std::string token = "t0ken") {
  transport_config c;
  c.token = std::move(token);
  c.heartbeat_interval = 50ms;
  c.heartbeat_timeout = 400ms;
  c.reconnect_initial = 20ms;
  c.reconnect_max = 200ms;
  return c;
}

std::unique_ptr<endpoint> make(const std::string& name, transport_config c = test_config(),
                               std::uint64_t inc = 0) {
  auto e = endpoint::create(node_id{name, inc}, std::move(c));
  EXPECT_TRUE(e) << e.err().to_string();
  return std::move(*e);
}

template <class T>
bool ready(std::future<T>& f, std::chrono::milliseconds d = 5s) {
  return f.wait_for(d) == std::future_status::ready;
}

// Polls `pred` until it holds (true) or `d` has passed (false).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds d = 5s) {
  for (auto until = std::chrono::steady_clock::now() + d; !pred();) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

outbound ping(std::uint64_t seq) {
  outbound o;
  o.body().initPing().setSeq(seq);
  return o;
}

TEST(endpoint, delivers_by_name_and_answers_pings) {
  auto a = make("alpha"), b = make("beta");
  auto addr = a->listen("127.0.0.1", 0);
  ASSERT_TRUE(addr) << addr.err().to_string();
  ASSERT_TRUE(install_echo(*a));
  auto peer = b->connect(*addr);
  ASSERT_TRUE(peer) << peer.err().to_string();
  EXPECT_EQ(peer->name, "alpha");
  auto r = run_ping(*b, {"alpha", "echo", 50, 5, 100});
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(r->count, 50u);
  EXPECT_GT(r->p50_us, 0);

  std::promise<std::string> from;
  ASSERT_TRUE(b->register_name("sink", [&](const message& m) { from.set_value(m.from_node().to_string()); }));
  EXPECT_FALSE(b->register_name("sink", [](const message&) {}));
  ASSERT_TRUE(a->send("beta", "sink", ping(1), "echo"));
  auto f = from.get_future();
  ASSERT_TRUE(ready(f));
  EXPECT_EQ(f.get(), "alpha#0");
  EXPECT_EQ(a->send("gamma", "sink", ping(2)).err(), transport_errc::not_connected);
  EXPECT_EQ(a->send("beta", "Bad Name", ping(3)).err(), transport_errc::bad_name);
  EXPECT_TRUE(run_ping(*b, {"alpha", "echo", 5, 0, 8})) << "a refused send must not break the link";
}

TEST(endpoint, a_probe_of_a_name_the_node_lacks_fails_at_once) {
  auto a = make("alpha"), b = make("beta");
  auto addr = a->listen("127.0.0.1", 0);
  ASSERT_TRUE(addr) << addr.err().to_string();
  ASSERT_TRUE(b->connect(*addr));  // alpha has no echo: it waited the whole timeout (30 s) for a pong
  ping_options p{"alpha", "echo", 5, 0, 8};
  p.timeout = 20s;
  const auto start = std::chrono::steady_clock::now();
  auto r = run_ping(*b, p);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.err(), transport_errc::bad_name);
  EXPECT_NE(r.err().to_string().find("'echo' on node alpha: not registered"), std::string::npos)
      << r.err().to_string();
  bulk_options bo;
  bo.node = "alpha";
  bo.frames = 200'000;  // 13 GB: the rest is not sent once the watch says the name is not there
  bo.frame_bytes = 65'536;
  bo.timeout = 20s;
  auto bulk = run_bulk(*b, bo);
  ASSERT_FALSE(bulk);
  EXPECT_EQ(bulk.err(), transport_errc::bad_name);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
  ASSERT_TRUE(install_echo(*a));
  EXPECT_TRUE(run_ping(*b, p)) << "with its echo, the same probe answers";
}

TEST(endpoint, delivers_locally_to_its_own_node) {
  auto a = make("alpha");
  std::promise<std::uint64_t> got;
  ASSERT_TRUE(a->register_name("me", [&](const message& m) { got.set_value(m.body().getPing().getSeq()); }));
  ASSERT_TRUE(a->send("alpha", "me", ping(9)));
  auto f = got.get_future();
  ASSERT_TRUE(ready(f));
  EXPECT_EQ(f.get(), 9u);
}

// Any frame tells the peer that its sender is alive, so a side that keeps sending sends no
// heartbeats of its own, while a quiet side keeps sending them (and the link stays up both ways).
TEST(endpoint, a_side_that_keeps_sending_sends_no_heartbeats) {
  auto a = make("alpha"), b = make("beta");  // heartbeats every 50 ms
  std::atomic<int> got{0};
  ASSERT_TRUE(a->register_name("sink", [&](const message&) { ++got; }));
  auto addr = a->listen("127.0.0.1", 0);
  ASSERT_TRUE(addr);
  ASSERT_TRUE(b->connect(*addr));
  const auto a0 = a->stats().frames_received, b0 = b->stats().frames_received;
  constexpr int frames = 120;  // one every 5 ms: 600 ms, twelve heartbeat intervals
  for (int i = 0; i < frames; ++i) {
    ASSERT_TRUE(b->send("alpha", "sink", ping(i)));
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(eventually([&] { return got.load() == frames; })) << got.load();
  const auto beta_beats = a->stats().frames_received - a0 - frames;  // what else came from beta
  const auto alpha_beats = b->stats().frames_received - b0;          // alpha sent only heartbeats
  EXPECT_GE(alpha_beats, 6u) << "the quiet side's heartbeats must go on";
  EXPECT_LE(beta_beats * 3, alpha_beats) << "beta sent " << beta_beats << " heartbeats beside its frames";
  EXPECT_TRUE(a->connected("beta"));
  EXPECT_TRUE(b->connected("alpha"));
}

// An idle connection writes its heartbeats straight to the socket. Where the socket takes part of
// one (here a few bytes, then none: as if full), the rest goes through the send queue, in order:
// the peer reads whole heartbeats, closes nothing and keeps the link up.
TEST(endpoint, heartbeats_a_full_socket_takes_in_part_arrive_whole) {
  auto a = make("alpha"), b = make("beta");  // heartbeats every 50 ms, timeout 400 ms
  std::atomic<int> got{0};
  ASSERT_TRUE(a->register_name("sink", [&](const message&) { ++got; }));
  auto addr = a->listen("127.0.0.1", 0);
  ASSERT_TRUE(addr);
  ASSERT_TRUE(b->connect(*addr));
  for (std::size_t limit : {3u, 0u}) {
    endpoint_testing::limit_direct_writes(*b, limit);
    const auto a0 = a->stats().frames_received;
    std::this_thread::sleep_for(600ms);  // twelve heartbeat intervals, beta idle
    EXPECT_GE(a->stats().frames_received - a0, 6u) << "beta's heartbeats (limit " << limit << ")";
    EXPECT_EQ(a->stats().malformed_frames, 0u) << "limit " << limit;
    EXPECT_TRUE(a->connected("beta"));
    EXPECT_TRUE(b->connected("alpha"));
  }
  endpoint_testing::limit_direct_writes(*b, SIZE_MAX);
  ASSERT_TRUE(b->send("alpha", "sink", ping(1)));
  EXPECT_TRUE(eventually([&] { return got.load() == 1; }));
  // The queue drains on beta's io thread: a heartbeat queued beside the ping may still be in it when
  // the ping arrives (96 bytes seen once in a loaded CI run); drained soon after, never kept.
  EXPECT_TRUE(eventually([&] { return b->stats().queued_bytes == 0; })) << b->stats().queued_bytes;
}

// A sender off the io thread that finds the queue full waits for room (up to its limit) and gets
// it once the peer reads again: the endpoint's one condition variable wakes it.
TEST(endpoint, a_sender_waiting_for_room_gets_it_when_the_queue_drains) {
  auto cfg = test_config();
  cfg.send_queue_bytes = 2u << 20;
  cfg.heartbeat_timeout = 60s;  // alpha's io thread stalls for as long as the queue takes to fill
  auto a = make("alpha", cfg), b = make("beta", cfg);
  auto addr = a->listen("127.0.0.1", 0);
  std::promise<void> release;
  auto gate = release.get_future().share();
  std::atomic<int> got{0};
  ASSERT_TRUE(a->register_name("slow", [gate, &got](const message&) {
    gate.wait();  // stalls a's io thread until released
    ++got;
  }));
  ASSERT_TRUE(b->connect(*addr));
  static std::vector<std::byte> big(1 << 20);
  auto big_ping = [] {
    outbound o;
    auto p = o.body().initPing();
    p.adoptPayload(o.builder().getOrphanage().referenceExternalData(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(big.data()), big.size())));
    return o;
  };
  // Fill beta's queue until it stays full: until the kernel's buffers are full too (alpha reads
  // nothing), the queue drains a little after each refusal.
  int sent = 0;
  bool full = false;
  for (int round = 0; round < 50 && !full; ++round) {
    while (sent < 400 && b->send("alpha", "slow", big_ping(), "", 1ms)) ++sent;
    const auto queued = b->stats().queued_bytes;
    std::this_thread::sleep_for(200ms);
    full = b->stats().queued_bytes >= queued;  // nothing drained for 200 ms (heartbeats were added)
  }
  ASSERT_TRUE(full) << "the queue never stayed full";
  // The kernel may still take a little (a receive buffer that grows): send until one is refused.
  int more = 0;
  while (more < 50 && b->send("alpha", "slow", big_ping(), "", 1ms)) ++more;
  ASSERT_LT(more, 50) << "a full queue must refuse a send it has no room for";
  auto start_waiter = [&] {
    return std::async(std::launch::async, [&] {
      const auto t0 = std::chrono::steady_clock::now();
      auto r = b->send("alpha", "slow", big_ping(), "", 10s);
      return std::make_pair(r ? std::string() : r.err().to_string(), std::chrono::steady_clock::now() - t0);
    });
  };
  // It waits while the queue is full. Under load the kernel may still take a little more (its
  // buffers grow) and give a waiting send room before the release: such a send must have
  // succeeded, it counts as delivered, and another one is tried (a send that never waits fails).
  auto waiter = start_waiter();
  for (int early = 0; waiter.wait_for(300ms) != std::future_status::timeout; ++early) {
    ASSERT_EQ(waiter.get().first, "") << "a send that did not wait must have had room";
    ++more;
    ASSERT_LT(early, 20) << "a send to a full queue never waited";
    waiter = start_waiter();
  }
  release.set_value();
  ASSERT_EQ(waiter.wait_for(10s), std::future_status::ready);
  auto [failed, waited] = waiter.get();
  EXPECT_EQ(failed, "") << "room came within the wait";
  EXPECT_LT(waited, 10s);
  // Every send that was taken arrives: the fill, those the kernel took after it, the waiter's.
  EXPECT_TRUE(eventually([&] { return got.load() == sent + more + 1; }))
      << got.load() << " of " << sent + more + 1;
}

// A stranger that connects and says nothing is dropped once the handshake deadline passes (the
// endpoint's heartbeat sweep checks it), not before; the endpoint's Hello is all it gets.
TEST(endpoint, a_silent_stranger_is_dropped_at_the_handshake_deadline) {
  auto cfg = test_config();
  cfg.handshake_timeout = 300ms;
  auto a = make("alpha", cfg);
  auto addr = a->listen("127.0.0.1", 0);
  ASSERT_TRUE(addr);
  const int port = std::stoi(addr->substr(addr->rfind(':') + 1));
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  char buf[4096];
  ssize_t n = 0, total = 0;
  while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) total += n;
  const auto waited = std::chrono::steady_clock::now() - t0;
  ::close(fd);
  EXPECT_EQ(n, 0) << "not closed by the endpoint within 10 s (errno " << errno << ")";
  EXPECT_GT(total, 0) << "the endpoint's Hello";
  EXPECT_GE(waited, 300ms) << "dropped before its handshake deadline";
  EXPECT_TRUE(eventually([&] { return a->stats().open_connections == 0; }));
}

// Strangers that connect and say nothing hold a descriptor each until their handshake deadline: past
// 512 of them at once the endpoint closes new ones at once (a flood ran a master and its PS shards
// out of descriptors, and their checkpoints failed to open). A member connected before keeps
// working through the flood, and once it ends a new peer joins.
TEST(endpoint, a_flood_of_silent_strangers_is_capped_and_members_keep_working) {
  rlimit l{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &l), 0);
  l.rlim_cur = l.rlim_max;
  (void)::setrlimit(RLIMIT_NOFILE, &l);
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &l), 0);
  if (l.rlim_cur < 2048)
    GTEST_SKIP() << "the flood needs ~1,400 descriptors in this process; the hard open-file limit is "
                 << l.rlim_max;
  auto cfg = test_config();
  cfg.handshake_timeout = 60s;  // the strangers stay for the whole test
  auto a = make("alpha", cfg);
  auto addr = a->listen("127.0.0.1", 0);
  ASSERT_TRUE(addr);
  ASSERT_TRUE(install_echo(*a));
  auto b = make("beta");
  ASSERT_TRUE(b->connect(*addr));
  const int port = std::stoi(addr->substr(addr->rfind(':') + 1));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<std::uint16_t>(port));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::vector<int> flood;
  for (int i = 0; i < 700; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    flood.push_back(fd);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0) << i;
  }
  // Every stranger was accepted or closed: those past the cap see the connection end at once.
  std::size_t closed = 0;
  EXPECT_TRUE(eventually(
      [&] {
        closed = 0;
        for (int fd : flood) {
          char c;
          closed += ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
        }
        return closed >= 700 - 512;
      },
      10s))
      << closed << " closed";
  EXPECT_LE(a->stats().open_connections, 512u + 1u);
  EXPECT_TRUE(run_ping(*b, {"alpha", "echo", 20, 0, 8})) << "the member's link works through the flood";
  for (int fd : flood) ::close(fd);
  EXPECT_TRUE(eventually([&] { return a->stats().open_connections == 1; }, 10s))
      << a->stats().open_connections;
  auto c = make("gamma");
  EXPECT_TRUE(c->connect(*addr)) << "a new peer joins once the flood is over";
}

// Many endpoints on two shared io threads: each is a node of its own (identity, connection,
// heartbeats), they serve traffic side by side, and destroying some (a connected one, one re-dialling
// a dead peer) while the others keep sending leaves the others, and the threads, working.
TEST(endpoint, endpoints_sharing_an_io_group_work_and_stop_one_by_one) {
  auto hub = make("hub");
  auto addr = hub->listen("127.0.0.1", 0);
  ASSERT_TRUE(addr);
  ASSERT_TRUE(install_echo(*hub));
  std::atomic<int> downs{0};
  hub->on_peer_down([&](const peer_event&) { ++downs; });
  io_group group(2);
  std::vector<std::unique_ptr<endpoint>> nodes;
  for (int i = 0; i < 8; ++i) {
    std::string name = "n";
    name += std::to_string(i);  // not "n" + to_string: GCC 12's -Wrestrict false positive at -O3
    auto e = endpoint::create(node_id{name, 0}, test_config(), &group);
    ASSERT_TRUE(e) << e.err().to_string();
    ASSERT_TRUE((*e)->connect(*addr));
    nodes.push_back(std::move(*e));
  }
  EXPECT_TRUE(eventually([&] { return hub->stats().open_connections == 8; }));
  for (auto& n : nodes) {
    auto r = run_ping(*n, {"hub", "echo", 20, 0, 64});
    ASSERT_TRUE(r) << r.err().to_string();
    EXPECT_EQ(r->count, 20u);
  }
  // One node re-dials a peer that went away (its timers and connects are on a shared thread).
  auto gone = make("gone");
  auto gone_addr = gone->listen("127.0.0.1", 0);
  ASSERT_TRUE(gone_addr);
  ASSERT_TRUE(nodes[7]->connect(*gone_addr, true));
  gone.reset();
  std::atomic<bool> stop{false};
  std::thread traffic([&] {
    while (!stop) {
      for (int i = 0; i < 4; ++i) (void)run_ping(*nodes[i], {"hub", "echo", 2, 0, 64});
    }
  });
  std::this_thread::sleep_for(30ms);
  for (int i = 4; i < 8; ++i) nodes[i].reset();  // while 0-3 send and 7 re-dials
  EXPECT_TRUE(eventually([&] { return downs.load() >= 4; })) << downs.load();
  stop = true;
  traffic.join();
  for (int i = 0; i < 4; ++i) {
    auto r = run_ping(*nodes[i], {"hub", "echo", 10, 0, 64});
    ASSERT_TRUE(r) << "node " << i << ": " << r.err().to_string();
  }
  auto late = endpoint::create(node_id{"late", 0}, test_config(), &group);
  ASSERT_TRUE(late);
  ASSERT_TRUE((*late)->connect(*addr)) << "a new endpoint on the shared threads";
  EXPECT_TRUE(run_ping(**late, {"hub", "echo", 5, 0, 64}));
  late->reset();
  nodes.clear();
  EXPECT_TRUE(eventually([&] { return hub->stats().open_connections == 0; }));
}

TEST(endpoint, wrong_or_missing_token_is_refused_and_nothing_is_delivered) {
  auto a = make("alpha");
  std::atomic<int> delivered{0};
  ASSERT_TRUE(a->register_name("echo", [&](const message&) { ++delivered; }));
  auto addr = a->listen("127.0.0.1", 0);
  for (std::string tok : {"wrong", ""}) {
    auto b = make("beta", test_config(tok));
    auto peer = b->connect(*addr, false);
    ASSERT_FALSE(peer) << "token '" << tok << "'";
    EXPECT_EQ(peer.err(), transport_errc::auth_failed) << peer.err().to_string();
    EXPECT_EQ(b->send("alpha", "echo", ping(1)).err(), transport_errc::not_connected);
  }
  // Once alpha has refused both and closed their connections, nothing more can come from them.
  EXPECT_TRUE(eventually([&] { return a->stats().auth_refused >= 2 && a->stats().open_connections == 0; }))
      << "refused " << a->stats().auth_refused << ", open " << a->stats().open_connections;
  EXPECT_EQ(delivered.load(), 0);
}

TEST(endpoint, watch_reports_unregistered_unknown_and_dead_nodes) {
  auto a = make("alpha"), b = make("beta");
  auto addr = a->listen("127.0.0.1", 0);
  ASSERT_TRUE(a->register_name("svc", [](const message&) {}));
  ASSERT_TRUE(a->register_name("other", [](const message&) {}));
  ASSERT_TRUE(install_echo(*a));
  ASSERT_TRUE(b->connect(*addr));
  std::promise<std::string> unknown, unreg, dead;
  b->watch("alpha", "nobody", [&](const actor_address&, const std::string& r) { unknown.set_value(r); });
  b->watch("alpha", "svc",
           [&](const actor_address& w, const std::string& r) { unreg.set_value(w.name + ": " + r); });
  b->watch("alpha", "other", [&](const actor_address&, const std::string& r) { dead.set_value(r); });
  auto fu = unknown.get_future();
  ASSERT_TRUE(ready(fu));
  EXPECT_EQ(fu.get(), "not registered");
  ASSERT_TRUE(run_ping(*b, {"alpha", "echo", 1, 0, 8}));  // the watches have arrived
  a->unregister_name("svc");
  auto fr = unreg.get_future();
  ASSERT_TRUE(ready(fr));
  EXPECT_EQ(fr.get(), "svc: unregistered");
  a.reset();
  auto fd = dead.get_future();
  ASSERT_TRUE(ready(fd));
  EXPECT_NE(fd.get().find("node down"), std::string::npos);
  std::promise<std::string> late;
  b->watch("alpha", "svc", [&](const actor_address&, const std::string& r) { late.set_value(r); });
  auto fl = late.get_future();
  ASSERT_TRUE(ready(fl));
  EXPECT_EQ(fl.get(), "node not connected");
}

TEST(endpoint, full_send_queue_pushes_back) {
  auto cfg = test_config();
  cfg.send_queue_bytes = 2u << 20;
  cfg.heartbeat_timeout = 5000ms;
  auto a = make("alpha"), b = make("beta", cfg);
  auto addr = a->listen("127.0.0.1", 0);
  std::promise<void> release;
  auto gate = release.get_future().share();
  ASSERT_TRUE(a->register_name("slow", [gate](const message&) { gate.wait(); }));  // stalls a's io thread
  ASSERT_TRUE(b->connect(*addr));
  // Sends only once the connection is up: sends queued before it were flushed at once into the new
  // socket's buffers (several MB on loopback), so the queue could be empty again by the check below
  // (CI, 2026-11-30: pushed back, then 0 bytes queued).
  for (int i = 0; i < 5000 && !b->connected("alpha"); ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(b->connected("alpha"));
  static std::vector<std::byte> big(1 << 20);
  bool pushed_back = false;
  for (int i = 0; i < 200 && !pushed_back; ++i) {
    outbound o;
    auto p = o.body().initPing();
    p.adoptPayload(o.builder().getOrphanage().referenceExternalData(
        capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(big.data()), big.size())));
    auto r = b->send("alpha", "slow", std::move(o), "", 1ms);
    if (!r) {
      EXPECT_EQ(r.err(), transport_errc::queue_full) << r.err().to_string();
      pushed_back = true;
    }
  }
  EXPECT_TRUE(pushed_back);
  EXPECT_GT(b->stats().queued_bytes, 0);
  release.set_value();
}

TEST(endpoint, fault_injection_drops_and_delays) {
  auto a = make("alpha"), b = make("beta");
  auto addr = a->listen("127.0.0.1", 0);
  std::atomic<int> got{0};
  ASSERT_TRUE(a->register_name("sink", [&](const message&) { ++got; }));
  ASSERT_TRUE(install_echo(*a));
  ASSERT_TRUE(b->connect(*addr));
  b->set_fault_injection({1.0, {}});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(b->send("alpha", "sink", ping(i)));
  EXPECT_EQ(b->stats().frames_dropped, 20u);
  b->set_fault_injection({0.0, 30ms});
  auto r = run_ping(*b, {"alpha", "echo", 3, 0, 8});
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_GE(r->min_us, 30'000);
  EXPECT_EQ(got.load(), 0);
}

TEST(endpoint, redials_a_restarted_peer_with_backoff) {
  auto a = make("alpha");
  auto addr = a->listen("127.0.0.1", 0);
  auto port = parse_host_port(*addr)->port;
  auto b = make("beta");
  std::mutex mu;
  std::vector<std::string> events;
  std::promise<void> back, gone;
  b->on_peer_up([&](const peer_event& e) {
    std::lock_guard lk(mu);
    events.push_back("up " + e.node.to_string());
    if (e.node.incarnation == 1) back.set_value();
  });
  b->on_peer_down([&](const peer_event& e) {
    std::lock_guard lk(mu);
    events.push_back("down " + e.node.to_string());
    if (e.node.incarnation == 0) gone.set_value();
  });
  ASSERT_TRUE(b->connect(*addr));
  a.reset();
  auto down = gone.get_future();
  ASSERT_TRUE(ready(down)) << "beta never saw alpha#0 go";
  auto a2 = make("alpha", test_config(), 1);
  ASSERT_TRUE(a2->listen("127.0.0.1", port)) << "port reuse";
  auto f = back.get_future();
  ASSERT_TRUE(ready(f));
  std::lock_guard lk(mu);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0], "up alpha#0");
  EXPECT_EQ(events[1], "down alpha#0");
  EXPECT_EQ(events.back(), "up alpha#1");
}

TEST(endpoint, simultaneous_dials_settle_on_one_connection) {
  auto a = make("alpha"), b = make("beta");
  auto aa = a->listen("127.0.0.1", 0), ba = b->listen("127.0.0.1", 0);
  ASSERT_TRUE(install_echo(*a));
  ASSERT_TRUE(install_echo(*b));
  auto fa = std::async(std::launch::async, [&] { return a->connect(*ba); });
  auto fb = std::async(std::launch::async, [&] { return b->connect(*aa); });
  ASSERT_TRUE(fa.get());
  ASSERT_TRUE(fb.get());
  // Both dials have returned, so both connections exist until one side closes the duplicate.
  EXPECT_TRUE(eventually([&] {
    return a->stats().open_connections == 1 && b->stats().open_connections == 1;
  })) << a->stats().open_connections
      << " and " << b->stats().open_connections << " connections";
  EXPECT_TRUE(run_ping(*a, {"beta", "echo", 10, 0, 8}));
  EXPECT_TRUE(run_ping(*b, {"alpha", "echo", 10, 0, 8}));
  EXPECT_EQ(a->stats().open_connections, 1u);  // and the pings did not open another
  EXPECT_EQ(b->stats().open_connections, 1u);
}

}  // namespace
}  // namespace troupe
