// A node_context for unit tests of role actors: records every message a role sends (as the
// message its receiver would see), runs on a manual clock, and answers liveness from a set the
// test fills. Single-threaded use (the test drives the role by calling it).
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "node_context.hpp"
#include "troupe/nn/data/dataset.hpp"
#include "troupe/wire/messages.hpp"

namespace troupe::actors::testing {

class fake_node final : public node_context {
 public:
  struct sent {
    std::string node, to, from;
    message m;
  };

  // The spec stays default-built (tests change it through spec()): passing a `job::job_spec{}` temporary
  // trips GCC 12's -Wmaybe-uninitialized at -O3.
  explicit fake_node(node_identity who) : who_(std::move(who)) {}

  const job::job_spec& spec() const override { return spec_; }
  job::job_spec& spec() { return spec_; }
  const node_identity& who() const override { return who_; }
  expected<void> send(const std::string& node, const std::string& to, outbound&& m,
                      const std::string& from) override {
    if (!connected) return make_unexpected(core_errc::io_error, "fake: not connected to " + node);
    m.envelope().setTo(to);
    m.envelope().setFrom(from);
    auto msg = loopback_message(m, who_.id);
    if (!msg) return msg.err();
    if (msg->kind() == schema::Envelope::Body::MEMBERSHIP) hold_view(node, *msg);
    std::lock_guard lk(outbox_mu_);  // a worker's lease renewals during a step come from a thread
    outbox.push_back({node, to, from, std::move(*msg)});
    return {};
  }
  cluster::membership_view view() const override { return view_; }
  std::pair<cluster::membership_view, std::uint64_t> view_and_ring_epoch() const override {
    return {view_, ring_epoch_.load()};
  }
  const std::atomic<std::uint64_t>& ring_epoch() const override { return ring_epoch_; }
  // Single-threaded: nothing can change the epoch during the wait, so it returns at once when the
  // epoch already moved, else the waiter "waited" until the deadline (the manual clock moves there).
  void wait_ring_change(std::uint64_t seen, troupe::clock::time_point deadline) override {
    if (ring_epoch_.load() != seen) return;
    ++ring_waits;
    if (deadline > clock_.now()) clock_.advance(deadline - clock_.now());
  }
  void set_ring_epoch(std::uint64_t e) { ring_epoch_.store(e); }
  bool gone(const node_id& id) const override { return gone_nodes.count(id.to_string()) > 0; }
  std::vector<node_id> peers() const override { return connected_peers; }
  void forget(const node_id& id) override { forgotten.insert(id.to_string()); }
  const std::string& address() const override { return address_; }
  bool ready() const override { return ready_; }
  void mark_ready() override { ready_ = true; }
  bool leaving() const override { return leaving_flag; }
  void hand_back_pending(bool pending) override { hand_back_pending_flag = pending; }
  troupe::clock& clock() override { return clock_; }
  manual_clock& manual() { return clock_; }

  void hold_view(const std::string& node, const message& m) {
    auto v = wire::read_membership(m.body().getMembership());
    if (!v.delta()) {
      held_views[node] = std::move(v.view);
      return;
    }
    auto it = held_views.find(node);
    auto whole = it == held_views.end() ? std::nullopt : std::optional(wire::expand_delta(it->second, v));
    if (whole && *whole)
      it->second = std::move(**whole);
    else
      ++views_missed;
  }

  // Takes what was sent so far.
  std::vector<sent> take() {
    std::lock_guard lk(outbox_mu_);
    return std::exchange(outbox, {});
  }

  std::vector<sent> outbox;
  std::mutex outbox_mu_;
  // The view each node holds from the membership messages sent to it, as the node would: a whole
  // view replaces it, a delta applies to it. A delta that did not apply counts in views_missed.
  std::map<std::string, cluster::membership_view> held_views;
  std::size_t views_missed = 0;
  std::set<std::string> gone_nodes;      // node#incarnation
  std::vector<node_id> connected_peers;  // what peers() answers
  std::set<std::string> forgotten;       // node#incarnation, as forget() was called
  bool connected = true;                 // false: every send fails (an unreachable peer)
  std::size_t ring_waits = 0;            // wait_ring_change() calls that found the epoch unchanged
  bool leaving_flag = false;             // what leaving() answers
  bool hand_back_pending_flag = true;    // as hand_back_pending() set it last

 private:
  node_identity who_;
  std::string address_ = "127.0.0.1:1";
  job::job_spec spec_;
  cluster::membership_view view_;
  std::atomic<std::uint64_t> ring_epoch_{0};
  bool ready_ = true;
  manual_clock clock_;
};

// A received message of `from` (node and actor) to actor `to`, built by `fill`, carrying
// `correlation` (a request's id; 0: none).
template <typename Fill>
message incoming(const node_id& from, const std::string& from_actor, const std::string& to, Fill&& fill,
                 std::uint64_t correlation = 0) {
  outbound o;
  o.envelope().setTo(to);
  o.envelope().setFrom(from_actor);
  o.envelope().setCorrelationId(correlation);
  fill(o.body());
  auto m = loopback_message(o, from);
  if (!m) throw std::runtime_error(m.err().to_string());
  return std::move(*m);
}

// A fresh directory under the system temp dir, removed first.
inline std::string temp_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("troupe-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

// A 40-row dataset: one dense feature (the row index), labels alternating 0/1.
inline nn::dataset tiny_dataset() {
  nn::dataset d;
  d.info.name = "t";
  d.info.dense_dim = 1;
  d.info.num_classes = 2;
  d.rows = 40;
  for (std::size_t i = 0; i < d.rows; ++i) {
    d.dense.push_back(static_cast<float>(i));
    d.labels.push_back(static_cast<float>(i % 2));
  }
  return d;
}

}  // namespace troupe::actors::testing
