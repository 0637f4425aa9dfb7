// An rpc_channel for unit tests: records every request (as the message its receiver would see),
// answers only when the test says so, and times requests out on the node's (manual) clock the way
// wire::rpc_client does on the real one. Single-threaded use.
#pragma once

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "troupe/core/clock.hpp"
#include "troupe/wire/rpc.hpp"

namespace troupe::actors::testing {

class fake_rpc final : public wire::rpc_channel {
 public:
  struct sent {
    std::uint64_t id = 0;
    std::string node, to;
    message m;
    troupe::clock::time_point at;
  };

  fake_rpc(troupe::clock& clock, node_id self) : clock_(clock), self_(std::move(self)) {}

  expected<std::uint64_t> send(request req, std::chrono::milliseconds timeout) override {
    ++attempts[req.out.body().which()];
    if (!reachable) return make_unexpected(core_errc::io_error, "fake rpc: " + req.node + " not connected");
    req.out.envelope().setTo(req.to);
    req.out.envelope().setFrom("rpc");
    auto m = loopback_message(req.out, self_);
    if (!m) return m.err();
    std::uint64_t id = ++last_id_;
    requests.push_back({id, req.node, req.to, std::move(*m), clock_.now()});
    deadline_[id] = clock_.now() + timeout;
    return id;
  }
  std::optional<expected<message>> poll(std::uint64_t id) override {
    if (auto r = replies_.find(id); r != replies_.end()) {
      auto reply = std::move(r->second);
      replies_.erase(r);
      deadline_.erase(id);
      return reply;
    }
    auto d = deadline_.find(id);
    if (d == deadline_.end())
      return expected<message>(make_unexpected(core_errc::invalid_argument, "not pending"));
    if (clock_.now() < d->second) return std::nullopt;
    deadline_.erase(d);
    return expected<message>(make_unexpected(core_errc::io_error, "fake rpc: timed out"));
  }
  // Single-threaded: no reply can come during the wait, so it returns at once when the reply (or
  // the failure) is there or the request is not pending; else the waiter "waited" `most`, or until
  // the request's timeout when that comes first (the manual clock moves there).
  void wait(std::uint64_t id, std::chrono::milliseconds most) override {
    ++waits;
    if (replies_.count(id) > 0) return;
    auto d = deadline_.find(id);
    if (d == deadline_.end()) return;
    auto until = std::min<troupe::clock::time_point>(clock_.now() + most, d->second);
    if (until > clock_.now()) clock_.sleep_for(until - clock_.now());
  }
  expected<message> call(request, std::chrono::milliseconds) override {
    return make_unexpected(core_errc::invalid_argument, "fake rpc: call is not faked");
  }
  expected<std::vector<message>> call_all(std::vector<request>&, std::chrono::milliseconds) override {
    return make_unexpected(core_errc::invalid_argument, "fake rpc: call_all is not faked");
  }

  // The reply to request `id` (built by `fill` on a fresh body), from master#1, for its next poll.
  template <typename Fill>
  void answer(std::uint64_t id, Fill&& fill) {
    outbound o;
    o.envelope().setFrom("dispenser");
    fill(o.body());
    auto m = loopback_message(o, node_id{"master", 1});
    replies_.emplace(id, std::move(*m));
  }
  // Request `id` fails (its node went down) at its next poll.
  void fail(std::uint64_t id) {
    replies_.emplace(id, expected<message>(make_unexpected(core_errc::io_error, "fake rpc: node down")));
  }
  bool pending(std::uint64_t id) const { return deadline_.count(id) > 0; }

  // The requests of body kind `k`, oldest first.
  std::vector<const sent*> of(schema::Envelope::Body::Which k) const {
    std::vector<const sent*> r;
    for (const auto& s : requests)
      if (s.m.kind() == k) r.push_back(&s);
    return r;
  }

  std::vector<sent> requests;
  std::map<schema::Envelope::Body::Which, std::size_t>
      attempts;           // send() calls by kind, failed ones included
  bool reachable = true;  // false: send() fails (the master's connection is down)
  std::size_t waits = 0;  // wait() calls

 private:
  troupe::clock& clock_;
  node_id self_;
  std::uint64_t last_id_ = 0;
  std::map<std::uint64_t, troupe::clock::time_point> deadline_;
  std::map<std::uint64_t, expected<message>> replies_;
};

}  // namespace troupe::actors::testing
