// The ring session with links chosen per pair of neighbours: shared memory (shm/link.hpp) between
// ranks on one host, TCP (tcp/link.hpp) between hosts, and a mixed link (mixed/link.hpp) for a rank
// with one neighbour of each kind, so one ring mixes both. Hosts are the members' host keys
// (ring_member::host); a ring on one host is all shared memory, as a local job's.
//
// A ring is built for each ring epoch of the node's view (ring_context); a worker alone trains
// alone, a ring of two whose other member died becomes this worker alone at once, and a worker that
// trained alone with a same-host partner joining goes on alone, a step at a time, until that
// partner has made its inbound ring.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "troupe/collective/ring_context.hpp"
#include "troupe/collective/ring_session.hpp"
#include "troupe/collective/shm/link.hpp"
#include "troupe/collective/tcp/link.hpp"

namespace troupe::transport {
class shm_ring;
}

namespace troupe::collective {

struct mixed_session_options {
  std::size_t capacity = 4 << 20;             // bytes per shared-memory ring
  std::chrono::milliseconds timeout{10'000};  // per exchange, and for a ring's rendezvous
  // A TCP neighbour silent this long (cut off, hung) is dead (TCP keepalive and user timeout).
  std::chrono::milliseconds heartbeat_timeout{3'000};
  // Inbound shared-memory lanes (shm/link.hpp: threads of this rank that move slices of a large
  // transfer at once). 0: this process's CPUs over the ring's ranks on its host, 1 to 4. Only a
  // previous rank linked over shared memory on both sides writes them (a mixed link writes lane 0).
  int lanes = 0;
  std::size_t lane_min_bytes = 1 << 20;  // shm_link_options::lane_min_bytes: every worker of a job the same
  // shm_link_options::fused_min_bytes, for a ring all on this host: every worker of a job the same.
  std::size_t fused_min_bytes = 16 << 20;
  // The links' clock (shm_link_options::clock, tcp_link_options::clock); link times are logged on it.
  std::reference_wrapper<troupe::clock> clock{troupe::clock::system()};
};

// The lanes `options.lanes` asks for with `local_ranks` ring ranks on this host (its 0 resolved).
int session_lanes(const mixed_session_options& options, int local_ranks);

class mixed_ring_session final : public ring_session {
 public:
  // `ctx` must outlive the session.
  mixed_ring_session(ring_context& ctx, mixed_session_options options);
  ~mixed_ring_session() override;
  // Makes this worker's next inbound ring ahead, populated (`at_once`, at start-up; else a slice per
  // step while it trains alone): the partner writing into it takes no page faults, neither the
  // replicas' state nor the first steps' gradients.
  void prepare(bool at_once = true);
  expected<info> ensure() override;
  expected<void> allreduce(std::span<float> data) override;
  expected<void> broadcast(std::span<float> data, int root) override;
  void reset() override;
  bool alone() const override;

 private:
  // ensure() without a new ring: the current one, or alone, while the ring epoch is `epoch`.
  bool unchanged(std::uint64_t epoch);
  // ensure() for a new ring epoch.
  expected<info> rebuild();
  // Links this rank (info_) to its neighbours in `ring`.
  expected<info> connect_ring(const ring_members& ring, bool was_alone);
  // The link to `prev` and `next`, of the kind their hosts call for.
  expected<std::unique_ptr<ring_link>> make_link(const ring_member& self, const ring_member& prev,
                                                 const ring_member& next);
  shm_link_options shm_options(const ring_member& prev, const ring_member& next);
  // A ring of two whose other member has exited (its process is gone: a fact, not a suspicion)
  // can only become this worker alone: it trains solo at once, without waiting for the master's
  // next view, until the ring epoch changes. When that view came first (the collective was
  // cancelled) and holds this worker alone, the same: solo in the new epoch, the step kept.
  void after_failure(const error& e);
  void prepare_some();
  void report_gone_neighbours();
  info train_alone(std::uint64_t epoch);

  ring_context& ctx_;
  mixed_session_options opt_;
  std::unique_ptr<ring_link> link_;
  shm_ring_link* shm_ = nullptr;                // link_ when both neighbours are on this host, else null
  std::unique_ptr<transport::shm_ring> spare_;  // prepare()'s ring until a link takes it
  bool spare_failed_ = false;                   // prepare() could not make one: not tried again
  info info_;
  std::uint64_t op_ = 0;
  int lanes_ = 1;                     // inbound lanes of the ring being linked
  bool all_on_host_ = false;          // every rank of that ring is on this host (its allreduce may be fused)
  std::uint64_t solo_epoch_ = 0;      // ring epoch during which this worker trains alone (0: none)
  std::uint64_t awaiting_epoch_ = 0;  // ring epoch whose joining partner has not made its ring yet
  info pending_;  // the ring linked to a joining partner that has not opened this worker's ring yet
  std::vector<node_id> neighbours_;  // prev, next of the current ring
};

}  // namespace troupe::collective
