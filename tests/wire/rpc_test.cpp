// wire::rpc_client between two real endpoints on loopback: replies paired with their requests by the
// envelope's correlation id (send + poll, call, call_all), a silent peer (timeout), a peer that
// goes down, replies that arrive out of order, and messages that answer nothing. On a manual clock,
// requests time out when the clock passes their deadline, never by real time.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "troupe/core/clock.hpp"

#include "troupe/transport/endpoint.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<endpoint> make(const std::string& name, std::uint64_t incarnation) {
  transport_config cfg;
  cfg.token = "rpc-test-token";
  auto e = endpoint::create(node_id{name, incarnation}, cfg);
  if (!e) throw std::runtime_error(e.err().to_string());
  return std::move(*e);
}

wire::rpc_channel::request report_request(std::uint64_t task) {
  wire::rpc_channel::request r{"server", "dispenser", outbound()};
  auto b = r.out.body().initTaskReport();
  b.setTaskId(task);
  b.setDone();
  return r;
}

// Polls until the answer (or 5 s).
expected<message> wait_poll(wire::rpc_channel& c, std::uint64_t id) {
  for (int i = 0; i < 5000; ++i) {
    if (auto r = c.poll(id)) return std::move(*r);
    std::this_thread::sleep_for(1ms);
  }
  return make_unexpected(core_errc::io_error, "poll never answered");
}

std::string ack_of(const message& m) {
  return m.body().getTaskReportAck().getError().cStr();
}

class rpc_send : public ::testing::Test {
 protected:
  void SetUp() override {
    // Incarnation 0, as every node of a job is when first launched (a PS shard, the master).
    server_ = make("server", 0);
    auto addr = server_->listen("127.0.0.1", 0);
    ASSERT_TRUE(addr) << addr.err().to_string();
    // Acknowledges every report (the ack's error names the task), except task `silent_`, holding
    // back the ack of task `late_` until the next report; before each ack it sends the requester
    // a stray ack with no correlation id, which must answer nothing.
    // The handler holds the endpoint itself, not server_: TearDown's server_.reset() nulls server_
    // before the endpoint's destructor runs, and a frame the client sent before it left may still be
    // handled in that window (it crashed the suite once in 150 runs under load).
    ASSERT_TRUE(server_->register_name("dispenser", [this, server = server_.get()](const message& m) {
      auto r = m.body().getTaskReport();
      if (r.getTaskId() == silent_) {
        silent_seen_ = true;
        return;
      }
      outbound stray;
      stray.body().initTaskReportAck().setError("stray");
      (void)server->send(m.from_node().name, "rpc", std::move(stray), "dispenser");
      outbound o = reply_to(m);
      o.body().initTaskReportAck().setError(std::to_string(r.getTaskId()));
      if (r.getTaskId() == late_) {
        held_ = std::move(o);
        held_from_ = m.from_node().name;
        holding_ = true;
        return;
      }
      if (held_) (void)server->send(held_from_, "rpc", std::move(*held_), "dispenser");
      held_.reset();
      (void)wire::send_reply(*server, m, std::move(o), "dispenser");
    }));
    client_ = make("client", 1);
    ASSERT_TRUE(client_->connect(*addr, false));
    auto c = wire::rpc_client::create(*client_, "rpc");
    ASSERT_TRUE(c) << c.err().to_string();
    rpc_ = std::move(*c);
  }
  void TearDown() override {
    rpc_.reset();
    client_.reset();
    server_.reset();
  }
  std::unique_ptr<endpoint> server_, client_;
  std::unique_ptr<wire::rpc_client> rpc_;
  std::uint64_t silent_ = 0, late_ = 0;
  std::optional<outbound> held_;  // touched on the server's io thread only
  std::string held_from_;
  std::atomic<bool> holding_{false};
  std::atomic<bool> silent_seen_{false};  // the server got the report it does not answer
};

TEST_F(rpc_send, poll_is_empty_until_the_reply_and_then_hands_it_over) {
  auto id = rpc_->send(report_request(10), 2000ms);
  ASSERT_TRUE(id) << id.err().to_string();
  EXPECT_NE(*id, 0u);
  auto r = wait_poll(*rpc_, *id);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(ack_of(*r), "10");
  EXPECT_EQ(r->correlation_id(), *id);
  // Answered: the request is forgotten.
  auto again = rpc_->poll(*id);
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(*again);
}

TEST_F(rpc_send, wait_returns_when_the_reply_comes_and_at_its_limit_when_none_does) {
  late_ = 50;  // held back until another request is sent
  auto held = rpc_->send(report_request(50), 2000ms);
  ASSERT_TRUE(held);
  for (int i = 0; i < 5000 && !holding_; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(holding_) << "the server never got the report";
  auto t0 = std::chrono::steady_clock::now();
  rpc_->wait(*held, 100ms);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms) << "no reply: wait lasts its limit";
  EXPECT_FALSE(rpc_->poll(*held).has_value());
  auto next = rpc_->send(report_request(51), 2000ms);  // releases the held ack
  ASSERT_TRUE(next);
  t0 = std::chrono::steady_clock::now();
  rpc_->wait(*held, 5000ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4000ms) << "woken by the reply, not by the limit";
  auto r = rpc_->poll(*held);
  ASSERT_TRUE(r.has_value());
  ASSERT_TRUE(*r) << r->err().to_string();
  EXPECT_EQ(ack_of(**r), "50");
  ASSERT_TRUE(wait_poll(*rpc_, *next));
}

TEST_F(rpc_send, replies_out_of_order_reach_their_own_requests) {
  late_ = 20;  // the first request's ack is held back until the second's is sent
  auto first = rpc_->send(report_request(20), 2000ms);
  ASSERT_TRUE(first);
  for (int i = 0; i < 5000 && !holding_; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(holding_) << "the server never got the first report";
  EXPECT_FALSE(rpc_->poll(*first).has_value()) << "its ack is held back: no reply yet";
  auto second = rpc_->send(report_request(30), 2000ms);
  ASSERT_TRUE(second);
  EXPECT_NE(*first, *second);
  auto b = wait_poll(*rpc_, *second), a = wait_poll(*rpc_, *first);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(ack_of(*a), "20");
  EXPECT_EQ(ack_of(*b), "30");
}

TEST_F(rpc_send, call_all_pairs_each_reply_with_its_request) {
  std::vector<wire::rpc_channel::request> reqs;
  for (std::uint64_t t : {41, 42, 43}) reqs.push_back(report_request(t));
  auto r = rpc_->call_all(reqs, 2000ms);
  ASSERT_TRUE(r) << r.err().to_string();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ(ack_of((*r)[0]), "41");
  EXPECT_EQ(ack_of((*r)[1]), "42");
  EXPECT_EQ(ack_of((*r)[2]), "43");
  auto one = rpc_->call(report_request(44), 2000ms);
  ASSERT_TRUE(one) << one.err().to_string();
  EXPECT_EQ(ack_of(*one), "44");
}

TEST_F(rpc_send, a_silent_peer_times_out) {
  silent_ = 40;
  auto id = rpc_->send(report_request(40), 100ms);
  ASSERT_TRUE(id);
  auto r = wait_poll(*rpc_, *id);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("no reply within 100 ms from server"), std::string::npos)
      << r.err().to_string();
  silent_ = 45;
  auto c = rpc_->call(report_request(45), 100ms);
  ASSERT_FALSE(c);
  EXPECT_NE(c.err().to_string().find("no reply within 100 ms from server/dispenser"), std::string::npos)
      << c.err().to_string();
}

TEST_F(rpc_send, a_peer_that_goes_down_fails_the_request_before_its_timeout) {
  silent_ = 50;
  auto id = rpc_->send(report_request(50), 60000ms);
  ASSERT_TRUE(id);
  auto t0 = std::chrono::steady_clock::now();
  server_.reset();
  auto r = wait_poll(*rpc_, *id);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("server went down before replying"), std::string::npos)
      << r.err().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A worker's PS pull or push while its shard stops (the job stopping): the call ends when the
// shard's connection drops, not after the rpc timeout (it waited 10 s, past the 3 s a stopping
// worker has).
TEST_F(rpc_send, a_peer_that_goes_down_fails_a_call_before_its_timeout) {
  silent_ = 52;
  std::vector<wire::rpc_channel::request> reqs;
  reqs.push_back(report_request(52));
  auto t0 = std::chrono::steady_clock::now();
  auto call = std::async(std::launch::async, [&] { return rpc_->call_all(reqs, 20000ms); });
  for (int i = 0; i < 5000 && !silent_seen_; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(silent_seen_) << "the server never got the report";
  server_.reset();
  ASSERT_EQ(call.wait_for(5s), std::future_status::ready) << "still waiting after the server went down";
  auto r = call.get();
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("server went down before replying"), std::string::npos)
      << r.err().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

// A worker that leaves (SIGTERM) stops waiting for its shards: the call in progress fails at once,
// whatever the silent peer does, and a wait returns.
TEST_F(rpc_send, a_requested_stop_ends_a_call_and_a_wait_in_progress) {
  std::stop_source stop;
  auto c = wire::rpc_client::create(*client_, "rpc-stop", troupe::clock::system(), stop.get_token());
  ASSERT_TRUE(c) << c.err().to_string();
  auto& rpc = **c;
  silent_ = 53;
  auto sent = rpc.send(report_request(53), 20000ms);
  ASSERT_TRUE(sent);
  std::vector<wire::rpc_channel::request> reqs;
  reqs.push_back(report_request(53));
  auto call = std::async(std::launch::async, [&] { return rpc.call_all(reqs, 20000ms); });
  auto waited = std::async(std::launch::async, [&] { rpc.wait(*sent, 20000ms); });
  for (int i = 0; i < 5000 && !silent_seen_; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(silent_seen_) << "the server never got the report";
  stop.request_stop();
  ASSERT_EQ(call.wait_for(5s), std::future_status::ready) << "the call still waits after the stop";
  ASSERT_EQ(waited.wait_for(5s), std::future_status::ready) << "the wait still waits after the stop";
  auto r = call.get();
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("stopped (this node is leaving) while waiting for server/dispenser"),
            std::string::npos)
      << r.err().to_string();
  silent_ = 54;
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(rpc.call(report_request(54), 20000ms));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s) << "a call after the stop does not wait either";
}

TEST_F(rpc_send, on_a_manual_clock_a_sent_request_times_out_exactly_at_its_deadline) {
  manual_clock clk;
  auto c = wire::rpc_client::create(*client_, "rpc-manual", clk);
  ASSERT_TRUE(c) << c.err().to_string();
  silent_ = 70;
  auto id = (*c)->send(report_request(70), 60000ms);  // a minute: never reached in real time here
  ASSERT_TRUE(id);
  EXPECT_FALSE((*c)->poll(*id).has_value());
  clk.advance(59999ms);
  EXPECT_FALSE((*c)->poll(*id).has_value()) << "1 ms before its deadline: still pending";
  clk.advance(1ms);
  auto r = (*c)->poll(*id);
  ASSERT_TRUE(r.has_value()) << "at its deadline on the manual clock";
  ASSERT_FALSE(*r);
  EXPECT_NE(r->err().to_string().find("no reply within 60000 ms from server"), std::string::npos)
      << r->err().to_string();
}

TEST_F(rpc_send, on_a_manual_clock_call_and_wait_end_when_the_clock_passes_their_limit) {
  manual_clock clk;
  auto c = wire::rpc_client::create(*client_, "rpc-manual", clk);
  ASSERT_TRUE(c) << c.err().to_string();
  auto& rpc = **c;
  // Moves the clock an hour at a time until `f` is done (each limit below is an hour: real time
  // would take that long); the number of moves it took, or -1 when it never ended.
  auto hours_until = [&](auto& f) {
    for (int h = 1; h <= 500; ++h) {
      clk.advance(std::chrono::hours(1));
      if (f.wait_for(10ms) == std::future_status::ready) return h;
    }
    return -1;
  };
  silent_ = 71;
  auto call = std::async(std::launch::async, [&] { return rpc.call(report_request(71), 3600000ms); });
  EXPECT_GE(hours_until(call), 1);
  auto r = call.get();
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("no reply within 3600000 ms from server/dispenser"), std::string::npos)
      << r.err().to_string();

  silent_ = 72;
  auto id = rpc.send(report_request(72), 7200000ms);
  ASSERT_TRUE(id);
  auto waited = std::async(std::launch::async, [&] { rpc.wait(*id, 3600000ms); });
  EXPECT_GE(hours_until(waited), 1);
  waited.get();
  clk.advance(std::chrono::hours(2));
  auto p = rpc.poll(*id);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(*p) << "its own deadline passed on the manual clock";
}

TEST_F(rpc_send, sending_to_an_unknown_node_fails_at_once) {
  auto r = report_request(60);
  r.node = "nobody";
  EXPECT_FALSE(rpc_->send(std::move(r), 1000ms));
  auto p = rpc_->poll(1);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(*p) << "an unsent request is not pending";
}

}  // namespace
}  // namespace troupe::actors
