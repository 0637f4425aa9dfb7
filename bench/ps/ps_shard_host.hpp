// The server side of ps_bench: the real PS shard actor (ps/ps_shard.cpp, spawn_ps_shard) in a
// CAF actor system, reached over a real transport endpoint ("ps" on the endpoint goes to the
// actor's mailbox, as node_runtime delivers it; the shard's replies go back over the endpoint).
// Only what a shard reads of its node is provided: identity, spec, send, the system clock; no
// membership (the bench has no master).
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>

#include <caf/all.hpp>

#include "caf_types.hpp"
#include "node_context.hpp"
#include "roles.hpp"
#include "troupe/job/data.hpp"
#include "troupe/transport/endpoint.hpp"

namespace troupe::actors::bench {

// The job the bench's shard and client both build their model from: DeepFM with 16-float (64-byte)
// embedding rows, Adam, one shard, periodic checkpoints effectively off (one an hour).
inline constexpr const char* ps_bench_job = R"(
[job]
strategy = "async_ps"
name = "ps-bench"
[ps]
shards = 1
checkpoint_every_ms = 3600000
[model]
type = "deepfm"
embedding_dim = 16
hidden = [32]
[train]
optimizer = "adam"
learning_rate = 0.01
[data]
source = "synthetic-ctr"
rows = 2048
test_rows = 1024
fields = 6
vocab_per_field = 50
)";

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
  std::string address_;

 private:
  node_identity who_;
  job::job_spec spec_;
  endpoint& net_;
  std::atomic<std::uint64_t> epoch_{0};
};

// A shard listening on host:port (port 0: any); bound() is the address it got.
class shard_host {
 public:
  static expected<std::unique_ptr<shard_host>> start(const job::job_spec& spec,
                                                     const job::prepared_data& data, const std::string& work,
                                                     const std::string& host, std::uint16_t port) {
    std::unique_ptr<shard_host> h(new shard_host());
    transport_config cfg = spec.transport;
    cfg.token = "ps-bench";
    auto net = endpoint::create(node_id{"ps-0", 1}, cfg);
    if (!net) return net.err();
    h->net_ = std::move(*net);
    node_identity who{node_id{"ps-0", 1}, cluster::node_role::ps, 0, work, "ps-bench", "ps-bench", 0};
    h->node_ = std::make_unique<endpoint_node>(who, spec, *h->net_);
    h->shard_ = spawn_ps_shard(h->sys_, *h->node_, data_paths{data.train_dir, data.test_dir});
    caf::actor a = h->shard_;
    if (auto r = h->net_->register_name("ps", [a](const message& m) { caf::anon_send(a, m); }); !r)
      return r.err();
    auto addr = h->net_->listen(host, port);
    if (!addr) return addr.err();
    h->node_->address_ = *addr;
    return h;
  }
  ~shard_host() {
    caf::anon_send_exit(shard_, caf::exit_reason::user_shutdown);
    sys_.await_all_actors_done();  // the shard may still send through net_ until it is gone
    net_.reset();
  }
  const std::string& bound() const { return node_->address_; }

 private:
  shard_host() : sys_(cfg_) {}
  caf::actor_system_config cfg_;
  caf::actor_system sys_;
  std::unique_ptr<endpoint> net_;
  std::unique_ptr<endpoint_node> node_;
  caf::actor shard_;
};

}  // namespace troupe::actors::bench
