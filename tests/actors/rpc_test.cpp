// rpc_client's non-blocking requests (send + poll) between two real endpoints on loopback: the
// reply, a silent peer (timeout), a peer that goes down, and replies that arrive out of order.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "rpc.hpp"
#include "troupe/transport/endpoint.hpp"

namespace troupe::actors {
namespace {

using namespace std::chrono_literals;

std::unique_ptr<endpoint> make(const std::string& name) {
  transport_config cfg;
  cfg.token = "rpc-test-token";
  auto e = endpoint::create(node_id{name, 1}, cfg);
  if (!e) throw std::runtime_error(e.err().to_string());
  return std::move(*e);
}

rpc_client::request report_request(std::uint64_t id) {
  rpc_client::request r{"server", "dispenser", outbound(), id};
  auto b = r.out.body().initTaskReport();
  b.setTaskId(id * 10);
  b.setRequestId(id);
  b.setDone();
  return r;
}

// Polls until the answer (or 5 s).
expected<message> wait_poll(rpc_client& c, std::uint64_t id) {
  for (int i = 0; i < 5000; ++i) {
    if (auto r = c.poll(id)) return std::move(*r);
    std::this_thread::sleep_for(1ms);
  }
  return make_unexpected(core_errc::io_error, "poll never answered");
}

class rpc_send : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = make("server");
    auto addr = server_->listen("127.0.0.1", 0);
    ASSERT_TRUE(addr) << addr.err().to_string();
    // Acknowledges every report, except task ids in `silent_`, holding back those in `late_`.
    ASSERT_TRUE(server_->register_name("dispenser", [this](const message& m) {
      auto r = m.body().getTaskReport();
      if (r.getTaskId() == silent_) return;
      outbound o;
      auto ack = o.body().initTaskReportAck();
      ack.setRequestId(r.getRequestId());
      ack.setError(std::to_string(r.getTaskId()));
      if (r.getTaskId() == late_) {
        held_ = std::move(o);
        held_from_ = m.from_node().name;
        holding_ = true;
        return;
      }
      if (held_) (void)server_->send(held_from_, "rpc", std::move(*held_), "dispenser");
      held_.reset();
      (void)server_->send(m.from_node().name, "rpc", std::move(o), "dispenser");
    }));
    client_ = make("client");
    ASSERT_TRUE(client_->connect(*addr, false));
    auto c = rpc_client::create(*client_, "rpc");
    ASSERT_TRUE(c) << c.err().to_string();
    rpc_ = std::move(*c);
  }
  void TearDown() override {
    rpc_.reset();
    client_.reset();
    server_.reset();
  }
  std::unique_ptr<endpoint> server_, client_;
  std::unique_ptr<rpc_client> rpc_;
  std::uint64_t silent_ = 0, late_ = 0;
  std::optional<outbound> held_;
  std::atomic<bool> holding_{false};  // the server holds the `late_` ack back
  std::string held_from_;
};

TEST_F(rpc_send, poll_is_empty_until_the_reply_and_then_hands_it_over) {
  ASSERT_TRUE(rpc_->send(report_request(1), 2000ms));
  auto r = wait_poll(*rpc_, 1);
  ASSERT_TRUE(r) << r.err().to_string();
  EXPECT_EQ(std::string(r->body().getTaskReportAck().getError().cStr()), "10");
  // Answered: the request is forgotten.
  auto again = rpc_->poll(1);
  ASSERT_TRUE(again.has_value());
  EXPECT_FALSE(*again);
}

TEST_F(rpc_send, replies_out_of_order_reach_their_own_requests) {
  late_ = 20;  // the first request's ack is held back until the second's is sent
  ASSERT_TRUE(rpc_->send(report_request(2), 2000ms));
  // The server has the request and holds its ack: nothing for it can have come back yet.
  for (int i = 0; i < 5000 && !holding_; ++i) std::this_thread::sleep_for(1ms);
  ASSERT_TRUE(holding_) << "the server never got request 2";
  EXPECT_FALSE(rpc_->poll(2).has_value()) << "no reply yet";
  ASSERT_TRUE(rpc_->send(report_request(3), 2000ms));
  auto b = wait_poll(*rpc_, 3), a = wait_poll(*rpc_, 2);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(std::string(a->body().getTaskReportAck().getError().cStr()), "20");
  EXPECT_EQ(std::string(b->body().getTaskReportAck().getError().cStr()), "30");
}

TEST_F(rpc_send, a_silent_peer_times_out) {
  silent_ = 40;
  ASSERT_TRUE(rpc_->send(report_request(4), 100ms));
  auto r = wait_poll(*rpc_, 4);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("no reply within 100 ms from server"), std::string::npos) << r.err().to_string();
}

TEST_F(rpc_send, a_peer_that_goes_down_fails_the_request_before_its_timeout) {
  silent_ = 50;
  ASSERT_TRUE(rpc_->send(report_request(5), 60000ms));
  auto t0 = std::chrono::steady_clock::now();
  server_.reset();
  auto r = wait_poll(*rpc_, 5);
  ASSERT_FALSE(r);
  EXPECT_NE(r.err().to_string().find("server went down before replying"), std::string::npos) << r.err().to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
}

TEST_F(rpc_send, sending_to_an_unknown_node_fails_at_once) {
  auto r = report_request(6);
  r.node = "nobody";
  EXPECT_FALSE(rpc_->send(std::move(r), 1000ms));
  auto p = rpc_->poll(6);
  ASSERT_TRUE(p.has_value());
  EXPECT_FALSE(*p) << "an unsent request is not pending";
}

}  // namespace
}  // namespace troupe::actors
