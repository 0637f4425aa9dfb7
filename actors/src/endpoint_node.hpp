// A node_context over a real transport endpoint, for the hosts of troupe/actors/testing/:
// identity, spec, send and the system clock; no membership (nothing there has a master), so the
// ring epoch never moves.
#pragma once

#include <atomic>
#include <string>
#include <utility>

#include "node_context.hpp"
#include "troupe/transport/endpoint.hpp"

namespace troupe::actors::testing {

class endpoint_node final : public node_context {
 public:
  endpoint_node(node_identity who, job::job_spec spec, endpoint& net)
      : who_(std::move(who)), spec_(std::move(spec)), net_(net) {}
  const job::job_spec& spec() const override { return spec_; }
  const node_identity& who() const override { return who_; }
  const std::string& address() const override { return address_; }
  expected<void> send(const std::string& node, const std::string& to, outbound&& m,
                      const std::string& from) override {
    return net_.send(node, to, std::move(m), from);
  }
  cluster::membership_view view() const override { return {}; }
  std::pair<cluster::membership_view, std::uint64_t> view_and_ring_epoch() const override { return {{}, 0}; }
  const std::atomic<std::uint64_t>& ring_epoch() const override { return epoch_; }
  // No ring here: the epoch never moves, so the wait lasts until the deadline.
  void wait_ring_change(std::uint64_t, troupe::clock::time_point deadline) override {
    auto now = clock().now();
    if (deadline > now) clock().sleep_for(deadline - now);
  }
  bool gone(const node_id&) const override { return false; }
  std::vector<node_id> peers() const override { return {}; }
  void forget(const node_id&) override {}
  bool ready() const override { return true; }
  void mark_ready() override {}
  troupe::clock& clock() override { return troupe::clock::system(); }
  void set_address(std::string a) { address_ = std::move(a); }

 private:
  node_identity who_;
  job::job_spec spec_;
  endpoint& net_;
  std::string address_;
  std::atomic<std::uint64_t> epoch_{0};
};

}  // namespace troupe::actors::testing
