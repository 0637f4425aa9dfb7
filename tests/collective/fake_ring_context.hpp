// Fakes of what a ring session needs from its node (ring_context, liveness), for ring sessions
// driven on threads of one process over real shared-memory rings and real TCP links on loopback
// (each context has its own ring listener; a ring member's host key places it on a "host"). Every session of
// one test shares one fake_cluster: its view (ring members and epoch), its liveness and the reports it
// received.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "troupe/collective/liveness.hpp"
#include "troupe/collective/ring_context.hpp"
#include "troupe/collective/tcp/link.hpp"

namespace troupe::collective::testing {

// Liveness that knows what the test says: mark_gone(node) makes it gone. Every poll of a watch is
// counted, so a test can wait until a collective is stalled on its neighbour.
class fake_liveness final : public liveness {
 public:
  class fake_watch final : public watch {
   public:
    fake_watch(fake_liveness& l, node_id n) : l_(l), n_(std::move(n)) {}
    bool gone() override { return l_.polled(n_); }

   private:
    fake_liveness& l_;
    node_id n_;
  };

  expected<std::unique_ptr<beacon>> start(const node_id&) override { return std::make_unique<beacon>(); }
  bool gone(const node_id& node) override {
    std::lock_guard lk(mu_);
    return gone_.count(node) != 0;
  }
  std::unique_ptr<watch> watch_node(const node_id& node) override {
    return std::make_unique<fake_watch>(*this, node);
  }
  void remove(const node_id& node) override {
    std::lock_guard lk(mu_);
    removed_.push_back(node);
  }
  void remove_all() override {}

  void mark_gone(const node_id& node) {
    std::lock_guard lk(mu_);
    gone_.insert(node);
  }
  // Waits until watches on `node` were polled `n` more times since the call (a collective waiting
  // on `node` polls at every stalled wait slice). False after `limit` (a failure, not a timing).
  bool wait_polls(const node_id& node, int n, std::chrono::seconds limit) {
    std::unique_lock lk(mu_);
    auto target = polls_[node] + n;
    return cv_.wait_for(lk, limit, [&] { return polls_[node] >= target; });
  }
  std::vector<node_id> removed() {
    std::lock_guard lk(mu_);
    return removed_;
  }

 private:
  bool polled(const node_id& node) {
    bool g;
    {
      std::lock_guard lk(mu_);
      ++polls_[node];
      g = gone_.count(node) != 0;
    }
    cv_.notify_all();
    return g;
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::set<node_id> gone_;
  std::map<node_id, long> polls_;
  std::vector<node_id> removed_;
};

struct fake_cluster {
  std::string job = "rstest" + std::to_string(::getpid());
  std::string secret = "fake-ring-token";  // every member's job token
  std::atomic<std::uint64_t> epoch{0};
  fake_liveness live;
  std::mutex mu;
  ring_members ring;
  std::vector<std::pair<node_id, std::string>> reports;  // report_gone calls

  // A new view: these nodes (no pids: only liveness watches them) form the ring of `e`, all on one
  // host.
  void publish(std::uint64_t e, const std::vector<node_id>& nodes) {
    std::vector<ring_member> members;
    for (const auto& n : nodes) {
      ring_member m;
      m.id = n;
      members.push_back(std::move(m));
    }
    publish(e, std::move(members));
  }
  // A new view with hosts and ring addresses (fake_ring_context::member()).
  void publish(std::uint64_t e, std::vector<ring_member> members) {
    std::lock_guard lk(mu);
    ring.epoch = e;
    ring.ranks = std::move(members);
    epoch.store(e, std::memory_order_release);
  }
};

class fake_ring_context final : public ring_context {
 public:
  fake_ring_context(fake_cluster& c, node_id self) : c_(c), self_(std::move(self)) {}
  // This worker as a ring member on `host`, its ring listener on loopback (opened on first use).
  ring_member member(const std::string& host) {
    ring_member m;
    m.id = self_;
    m.host = host;
    if (auto* l = ring_listener()) m.ring_address = "127.0.0.1:" + std::to_string(l->port());
    return m;
  }
  tcp_listener* ring_listener() override {
    if (!listener_)
      if (auto l = tcp_listener::open("127.0.0.1"); l) listener_ = std::move(*l);
    return listener_.get();
  }
  const std::string& job() const override { return c_.job; }
  const node_id& self() const override { return self_; }
  ring_members members() const override {
    std::lock_guard lk(c_.mu);
    return c_.ring;
  }
  const std::atomic<std::uint64_t>& ring_epoch() const override { return c_.epoch; }
  void report_gone(const node_id& node, const std::string& why) override {
    std::lock_guard lk(c_.mu);
    c_.reports.emplace_back(node, why);
  }
  liveness& live() override { return c_.live; }
  const std::string& ring_secret() const override { return c_.secret; }

 private:
  fake_cluster& c_;
  node_id self_;
  std::unique_ptr<tcp_listener> listener_;
};

}  // namespace troupe::collective::testing
