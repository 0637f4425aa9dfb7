#include "troupe/collective/mixed/session.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <string>

#include <spdlog/spdlog.h>

#include "troupe/collective/mixed/link.hpp"
#include "troupe/transport/shm_ring.hpp"

namespace troupe::collective {

int session_lanes(const mixed_session_options& options, int local_ranks) {
  if (options.lanes > 0) return std::min(options.lanes, shm_ring_link::max_lanes);
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = ::sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
  return std::clamp(cpus / std::max(local_ranks, 1), 1, 4);
}

mixed_ring_session::mixed_ring_session(ring_context& ctx, mixed_session_options options)
    : ctx_(ctx), opt_(options) {}

mixed_ring_session::~mixed_ring_session() = default;

void mixed_ring_session::reset() {
  link_.reset();
  shm_ = nullptr;
}

void mixed_ring_session::prepare(bool at_once) {
  // "e0-...": epoch 0 is never a ring's, and remove_job_leftovers removes it with the job's rings
  // if this process is killed before using it.
  auto name = shm_ring_link::ring_name(ctx_.job(), 0, 0) + "-spare-" + std::to_string(::getpid());
  transport::shm_ring::remove(name);
  auto r = transport::shm_ring::create(name, opt_.capacity, at_once);
  if (!r) {
    if (!spare_failed_)
      spdlog::warn("ring: no spare ring ({}); rings are made when needed", r.err().to_string());
    spare_failed_ = true;
    return;
  }
  spare_ = std::move(*r);
}

// Alone: the spare inbound ring for the next worker to join is made a slice per step (allocating
// all 4 MiB at once would be one long step just when the survivor of a kill should not pause).
void mixed_ring_session::prepare_some() {
  if (!spare_ && !spare_failed_) prepare(false);
  if (spare_ && !spare_->populate_some(256 << 10)) {
    spdlog::warn(
        "ring: no spare ring (its pages cannot be had: is /dev/shm full?); rings are made when needed");
    spare_.reset();
    spare_failed_ = true;
  }
}

ring_session::info mixed_ring_session::train_alone(std::uint64_t epoch) {
  prepare_some();
  info_ = {0, 1, epoch, false};
  return info_;
}

expected<ring_session::info> mixed_ring_session::ensure() {
  // The common case, once per step, reads one atomic: the ring of this epoch is there already.
  if (unchanged(ctx_.ring_epoch().load(std::memory_order_acquire))) return info_;
  return rebuild();
}

bool mixed_ring_session::unchanged(std::uint64_t epoch) {
  if (link_ && pending_.epoch == epoch && epoch != 0) {
    // Linked to a joining partner that is still linking: alone until it is done.
    if (shm_ && shm_->prev_linked()) {
      info_ = pending_;
      pending_ = {};
    }
    return true;
  }
  pending_ = {};
  if (info_.epoch == epoch && (link_ || (info_.size == 1 && awaiting_epoch_ != epoch)) && epoch != 0) {
    if (info_.size == 1) prepare_some();
    info_.fresh = false;
    return true;
  }
  return false;
}

expected<ring_session::info> mixed_ring_session::rebuild() {
  // Epochs only grow: with the one read in ensure(), no ring of this newer epoch can be current.
  auto ring = ctx_.members();
  const std::uint64_t epoch = ring.epoch;
  // Trained alone until now (the first worker, or the survivor of a ring of two).
  bool was_alone = (info_.size == 1 && info_.epoch != 0) || solo_epoch_ != 0;
  reset();
  if (solo_epoch_ != 0 && solo_epoch_ == epoch) return train_alone(epoch);
  solo_epoch_ = 0;
  const int size = static_cast<int>(ring.ranks.size());
  int rank = -1;
  for (int r = 0; r < size && rank < 0; ++r)
    if (ring.ranks[static_cast<std::size_t>(r)].id.name == ctx_.self().name) rank = r;
  if (rank < 0)
    return make_unexpected(collective_errc::setup,
                           ctx_.self().to_string() + " is not in the ring of epoch " + std::to_string(epoch));
  info_ = {rank, size, epoch, true};
  op_ = 0;
  if (size == 1) {
    prepare_some();
    return info_;
  }
  const auto& other = ring.ranks[static_cast<std::size_t>((rank + 1) % size)];
  bool same_host = other.host == ring.ranks[static_cast<std::size_t>(rank)].host;
  if (size == 2 && was_alone && same_host && !shm_ring_link::ring_exists(ctx_.job(), epoch, (rank + 1) % 2)) {
    // A worker joins this one, which trained alone: it goes on alone, a step at a time, until the
    // newcomer has made its inbound ring (it is linking); then it links, at once, and sends it the
    // replicas' state. Its steps never wait for the newcomer's start-up.
    if (awaiting_epoch_ != epoch)
      spdlog::debug("ring epoch {}: training alone until /{} appears", epoch,
                    shm_ring_link::ring_name(ctx_.job(), epoch, (rank + 1) % 2));
    awaiting_epoch_ = epoch;
    return train_alone(epoch);
  }
  awaiting_epoch_ = 0;
  return connect_ring(ring, was_alone);
}

shm_link_options mixed_ring_session::shm_options(const ring_member& prev, const ring_member& next) {
  shm_link_options o;
  o.job = ctx_.job();
  o.epoch = info_.epoch;
  o.rank = info_.rank;
  o.size = info_.size;
  o.prev_pid = prev.pid;
  o.next_pid = next.pid;
  o.live = &ctx_.live();
  o.prev_node = prev.id;
  o.next_node = next.id;
  o.capacity = opt_.capacity;
  o.timeout = opt_.timeout;
  o.current_epoch = &ctx_.ring_epoch();
  o.spare = &spare_;
  o.lanes = lanes_;
  o.lane_min_bytes = opt_.lane_min_bytes;
  o.all_on_host = all_on_host_;
  o.fused_min_bytes = opt_.fused_min_bytes;
  o.clock = opt_.clock;
  return o;
}

expected<std::unique_ptr<ring_link>> mixed_ring_session::make_link(const ring_member& self,
                                                                   const ring_member& prev,
                                                                   const ring_member& next) {
  bool shm_prev = prev.host == self.host, shm_next = next.host == self.host;
  auto s = shm_options(prev, next);
  if (shm_prev && shm_next) {
    auto l = shm_ring_link::connect(s);
    if (!l) return l.err();
    shm_ = l->get();
    return std::unique_ptr<ring_link>(std::move(*l));
  }
  if (!shm_next && next.ring_address.empty())
    return make_unexpected(collective_errc::setup,
                           next.id.to_string() + " on host " + next.host + " has no ring address for TCP");
  if (!shm_prev && !ctx_.ring_listener())
    return make_unexpected(collective_errc::setup, "no ring listener for " + prev.id.to_string() +
                                                       " on host " + prev.host + " to connect to");
  mixed_link_options m;
  m.shm = std::move(s);
  m.tcp_next = !shm_next;
  m.next_address = next.ring_address;
  m.secret = ctx_.ring_secret();
  m.listener = ctx_.ring_listener();
  m.heartbeat_timeout = opt_.heartbeat_timeout;
  if (!shm_prev && !shm_next) {
    auto l = tcp_ring_link::connect(tcp_half_options(m), *ctx_.ring_listener());
    if (!l) return l.err();
    return std::unique_ptr<ring_link>(std::move(*l));
  }
  auto l = mixed_ring_link::connect(m);
  if (!l) return l.err();
  return std::unique_ptr<ring_link>(std::move(*l));
}

expected<ring_session::info> mixed_ring_session::connect_ring(const ring_members& ring, bool was_alone) {
  const auto& self = ring.ranks[static_cast<std::size_t>(info_.rank)];
  const auto& prev = ring.ranks[static_cast<std::size_t>((info_.rank + info_.size - 1) % info_.size)];
  const auto& next = ring.ranks[static_cast<std::size_t>((info_.rank + 1) % info_.size)];
  neighbours_ = {prev.id};
  if (next.id != prev.id) neighbours_.push_back(next.id);
  // Lanes in only from a previous rank whose both neighbours share its host (its link is all shared
  // memory; a mixed link writes lane 0 only).
  const auto& prev_prev =
      ring.ranks[static_cast<std::size_t>((info_.rank + 2 * info_.size - 2) % info_.size)];
  int local = 0;
  std::set<std::string> hosts;
  for (const auto& m : ring.ranks) {
    local += m.host == self.host;
    hosts.insert(m.host);
  }
  info_.hosts = static_cast<int>(hosts.size());
  lanes_ = prev.host == self.host && prev_prev.host == self.host ? session_lanes(opt_, local) : 1;
  all_on_host_ = local == info_.size;
  auto connect_start = opt_.clock.get().now();
  auto made = make_link(self, prev, next);
  if (!made) {
    after_failure(made.err());
    info_.epoch = 0;
    return made.err();
  }
  link_ = std::move(*made);
  spdlog::info("ring epoch {}: rank {} of {} ({}), linked in {:.2f} ms", info_.epoch, info_.rank, info_.size,
               shm_ ? fmt::format("shared memory, lanes {} in / {} out", shm_->lanes_in(), shm_->lanes_out())
               : prev.host == self.host || next.host == self.host ? std::string("shm and TCP")
                                                                  : std::string("TCP"),
               std::chrono::duration<double, std::milli>(opt_.clock.get().now() - connect_start).count());
  if (was_alone && shm_ && !shm_->prev_linked()) {
    // The newcomer has yet to open this worker's ring: one more step alone rather than wait for it.
    pending_ = info_;
    info_ = {0, 1, info_.epoch, false};
  }
  return info_;
}

expected<void> mixed_ring_session::allreduce(std::span<float> data) {
  if (info_.size <= 1) return {};
  if (!link_) return make_unexpected(collective_errc::setup, "no ring");
  auto r = ring_allreduce(*link_, info_.rank, info_.size, data, info_.epoch, ++op_);
  if (!r) {
    reset();
    after_failure(r.err());
    info_.epoch = 0;
  }
  return r;
}

expected<void> mixed_ring_session::broadcast(std::span<float> data, int root) {
  if (info_.size <= 1) return {};
  if (!link_) return make_unexpected(collective_errc::setup, "no ring");
  auto r = ring_broadcast(*link_, info_.rank, info_.size, data, root, info_.epoch, ++op_);
  if (!r) {
    reset();
    after_failure(r.err());
    info_.epoch = 0;
  }
  return r;
}

void mixed_ring_session::after_failure(const error& e) {
  const bool dead = e == collective_errc::peer_dead;
  if (dead) report_gone_neighbours();
  if (info_.size != 2 || !(dead || e == collective_errc::cancelled)) return;
  auto epoch = ctx_.ring_epoch().load(std::memory_order_acquire);
  if (epoch == info_.epoch) {
    if (!dead) return;
    solo_epoch_ = epoch;
    spdlog::info("ring of epoch {}: the other worker is gone ({}); training alone until the next view", epoch,
                 e.to_string());
    return;
  }
  // The master's next view is here already (it heard of the death first): when it holds this
  // worker alone, the step under way is this worker's alone as well, its gradients the average.
  auto next = ctx_.members();
  if (next.epoch == info_.epoch || next.ranks.size() != 1 || next.ranks[0].id.name != ctx_.self().name)
    return;
  solo_epoch_ = next.epoch;
  spdlog::info("ring of epoch {}: the view of epoch {} holds this worker alone ({}); training alone",
               info_.epoch, next.epoch, e.to_string());
}

bool mixed_ring_session::alone() const {
  return solo_epoch_ != 0 && solo_epoch_ == ctx_.ring_epoch().load(std::memory_order_acquire);
}

// The master hears of the death from the runner or the closed connection only once the dead
// process's teardown is over (milliseconds to tens of them); liveness tells now. The master
// checks liveness itself before it acts.
void mixed_ring_session::report_gone_neighbours() {
  for (const auto& id : neighbours_)
    if (ctx_.live().gone(id))
      ctx_.report_gone(id, "liveness beacon released (seen by " + ctx_.self().to_string() + ")");
}

}  // namespace troupe::collective
