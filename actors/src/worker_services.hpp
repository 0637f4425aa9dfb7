// The worker's implementations of the strategy services: PS access over the transport (rpc to
// the shards named in the membership view) and the allreduce ring over shared memory.
#pragma once

#include <memory>
#include <unordered_map>

#include "node_runtime.hpp"
#include "rpc.hpp"
#include "troupe/actors/collective/shm_ring_link.hpp"
#include "troupe/actors/strategy.hpp"
#include "troupe/transport/shm_ring.hpp"

namespace troupe::actors {

class remote_ps final : public ps_client {
 public:
  remote_ps(node_runtime& rt, rpc_channel& rpc) : rt_(rt), rpc_(rpc) {}
  expected<void> pull(nn::model& m, const nn::batch& b) override;
  expected<void> push(nn::model& m) override;

 private:
  // The node name of shard i, connected; error while it is not in the view (restarting).
  expected<std::string> shard_node(std::uint32_t i);
  node_runtime& rt_;
  rpc_channel& rpc_;
  std::vector<std::vector<std::uint64_t>> ids_by_shard_;
  std::unordered_map<std::uint64_t, std::uint32_t> slot_;
  std::vector<std::uint64_t> unique_;
  std::vector<float> rows_;
};

class shm_ring_session final : public ring_session {
 public:
  explicit shm_ring_session(node_runtime& rt) : rt_(rt) {}
  // Makes this worker's next inbound ring ahead, populated (`at_once`, at start-up; else a slice per
  // step while it trains alone): the partner writing into it takes no page faults, neither the
  // replicas' state nor the first steps' gradients.
  void prepare(bool at_once = true);
  expected<info> ensure() override;
  expected<void> allreduce(std::span<float> data) override;
  expected<void> broadcast(std::span<float> data, int root) override;
  void reset() override { link_.reset(); }
  bool alone() const override;

 private:
  // A ring of two whose other member has exited (its process is gone: a fact, not a suspicion)
  // can only become this worker alone: it trains solo at once, without waiting for the master's
  // next view, until the ring epoch changes.
  void after_failure(const error& e);
  void prepare_some();
  void report_gone_neighbours();

  node_runtime& rt_;
  std::unique_ptr<collective::shm_ring_link> link_;
  std::unique_ptr<transport::shm_ring> spare_;  // prepare()'s ring until a link takes it
  bool spare_failed_ = false;                    // prepare() could not make one: not tried again
  info info_;
  std::uint64_t op_ = 0;
  std::uint64_t solo_epoch_ = 0;      // ring epoch during which this worker trains alone (0: none)
  std::uint64_t awaiting_epoch_ = 0;  // ring epoch whose joining partner has not made its ring yet
  info pending_;  // the ring linked to a joining partner that has not opened this worker's ring yet
  std::vector<node_id> neighbours_;  // prev, next of the current ring
};

}  // namespace troupe::actors
