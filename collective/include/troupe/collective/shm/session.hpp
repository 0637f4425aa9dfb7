// The ring session over shared-memory links (link.hpp): every rank on this host. A ring is built
// for each ring epoch of the node's view (ring_context); a worker alone trains alone, a ring of two
// whose other member died becomes this worker alone at once, and a worker that trained alone goes
// on alone, a step at a time, until a joining partner has made its inbound ring.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "troupe/collective/ring_context.hpp"
#include "troupe/collective/ring_session.hpp"
#include "troupe/collective/shm/link.hpp"

namespace troupe::transport {
class shm_ring;
}

namespace troupe::collective {

struct shm_session_options {
  std::size_t capacity = 4 << 20;             // bytes per ring
  std::chrono::milliseconds timeout{10'000};  // per exchange, and for a ring's rendezvous
};

class shm_ring_session final : public ring_session {
 public:
  // `ctx` must outlive the session.
  shm_ring_session(ring_context& ctx, shm_session_options options);
  ~shm_ring_session() override;
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
  // ensure() without a new ring: the current one, or alone, while the ring epoch is `epoch`.
  bool unchanged(std::uint64_t epoch);
  // ensure() for a new ring epoch.
  expected<info> rebuild();
  // Links this rank (info_) to its neighbours in `ring`.
  expected<info> connect_ring(const ring_members& ring, bool was_alone);
  // A ring of two whose other member has exited (its process is gone: a fact, not a suspicion)
  // can only become this worker alone: it trains solo at once, without waiting for the master's
  // next view, until the ring epoch changes.
  void after_failure(const error& e);
  void prepare_some();
  void report_gone_neighbours();
  info train_alone(std::uint64_t epoch);

  ring_context& ctx_;
  shm_session_options opt_;
  std::unique_ptr<shm_ring_link> link_;
  std::unique_ptr<transport::shm_ring> spare_;  // prepare()'s ring until a link takes it
  bool spare_failed_ = false;                   // prepare() could not make one: not tried again
  info info_;
  std::uint64_t op_ = 0;
  std::uint64_t solo_epoch_ = 0;      // ring epoch during which this worker trains alone (0: none)
  std::uint64_t awaiting_epoch_ = 0;  // ring epoch whose joining partner has not made its ring yet
  info pending_;  // the ring linked to a joining partner that has not opened this worker's ring yet
  std::vector<node_id> neighbours_;  // prev, next of the current ring
};

}  // namespace troupe::collective
