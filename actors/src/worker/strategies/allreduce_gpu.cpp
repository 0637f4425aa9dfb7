// allreduce.cpp's algorithm on a device backend (backends/cuda_backend.hpp). Per step: gradients on
// the device; a small control allreduce over the CPU ring (samples, exhausted, ranks, ranks whose
// NCCL communicator is ready, then the goodput controller's vote: controller::vote_floats); then the
// gradients summed, weighted by batch size, over NCCL (every rank ready) or host-staged (download to
// pinned memory, CPU ring allreduce, upload); then the controller's round and the optimizer on the
// device at the learning rate's factor. Per ring epoch: the rendezvous through the master decides
// the path from the ranks' device uuids and hands out rank 0's NCCL unique id; the replicas and
// their controllers are resynchronised from the most trained one via the host.
// The gradient noise scale (docs/goodput.md, "The GPU path"): on the controller's rounds only (1 in
// noise_scale_every) each rank reduces |g|^2 on the device, queued after its backward and read back
// with its loss (no sync of its own), and the one float goes into the control allreduce; after the
// sum every rank reduces |mean g|^2 (that one waits for the stream). A ring of one pairs consecutive
// steps as the CPU path does: the step before a due round keeps its gradient in a device buffer (a
// device-to-device copy), and the due round reads |g|^2, |g'|^2 and g.g' with its loss.
// With Adam the norms are of the preconditioned gradient, as on the CPU path (grad_norms.hpp): on
// the rounds that compute norms, the device reducer's weights are recomputed from the trainer's
// second moments when due (a pass over them on the device, every 16 steps), and every reduction of
// the round is weighted by them.
#include "allreduce_gpu.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <optional>
#include <utility>

#include "grad_norms.hpp"
#include "replicas.hpp"
#include "troupe/gpu/comm_plan.hpp"
#include "worker/backends/cuda_backend.hpp"

namespace troupe::actors {

namespace {

using goodput::controller;

// No batch = "auto" on the device path (no gradient accumulation): the job file's batch_size.
goodput::controller_options fixed_batch(goodput::controller_options o) {
  o.auto_batch = false;
  return o;
}

class gpu_allreduce final : public strategy {
 public:
  gpu_allreduce(gpu_replica& g, const goodput::controller_options& o, const nn::optimizer_config& opt,
                bool estimate)
      : g_(g), self_(g.self), port_(*g.port), estimate_(estimate), ctl_(fixed_batch(o)), opt_(opt) {}
  std::string_view name() const override { return "allreduce (gpu)"; }
  bool steps_outlive_worker() const override { return true; }  // every replica applies every step
  std::vector<float> durable_state() const override { return ctl_.packed(); }
  wire::goodput_report goodput() const override {
    if (!estimate_ || !stepped_) return {};
    auto r = ctl_.report();
    r.ring_rank = static_cast<std::uint32_t>(rank_);
    return r;
  }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    auto ring = ctx.ring.ensure();
    if (!ring) return {step_result::kind::retry};
    if (ring->fresh)
      if (auto s = on_new_ring(ctx, *ring); !s) return dropped(ctx, s.err());
    rank_ = ring->rank;
    stepped_ = true;
    const double t0 = replicas::seconds_now(ctx);
    mine m;
    m.n = b ? b->size() : 0;
    m.full = b && m.n == static_cast<std::size_t>(ctl_.batch().local());
    plan_norms(*ring, m);
    if (b) {  // the trainer's own call: the CUDA backend's compute_gradients is it without the hook
      auto l = m.own ? g_.trainer->compute_gradients(*b, [&] { queue_own_norms(*ring, m); })
                     : g_.trainer->compute_gradients(*b);
      if (!l) throw std::runtime_error(l.err().to_string());
      m.loss = *l;
      m.compute_s = replicas::seconds_now(ctx) - t0;
    }
    read_own_norms(*ring, m);
    cast(ctx, *ring, m, exhausted);
    if (auto r = ctx.ring.allreduce(ctl_buf_); !r) return dropped(ctx, r.err());
    const replicas::round_vote vote(ctl_buf_);
    auto big_sqr = sum_gradients(ctx, *ring, m, vote);
    if (!big_sqr) return dropped(ctx, big_sqr.err());
    const double share =
        replicas::step_share(vote.samples, vote.ranks, static_cast<std::size_t>(ctl_.batch().local()));
    const auto round = read_round(ctx, *ring, m, *big_sqr, share, vote.samples);
    if (vote.samples == 0.0f) return {vote.empty_round()};
    ctx.backend.apply_gradients(share * round.lr_factor);
    keep_for_pair(*ring, m);
    ctl_.step_done(replicas::seconds_now(ctx) - t0, m.full);
    ++steps_;
    return {step_result::kind::trained, m.n, m.loss};
  }

 private:
  // This rank's step: its rows, loss and compute time, whether its batch was full, and its norms.
  struct mine {
    std::size_t n = 0;
    double loss = 0, compute_s = 0;
    bool full = false, due = false;
    bool own = false;             // its own norms queued with the compute
    std::optional<double> small;  // a ring: |g|^2; alone: the pair's mean |g_i|^2
    double pair_big = 0;          // alone: |(g + g') / 2|^2
  };
  static constexpr std::size_t ready_slot = replicas::round_vote::floats;  // ranks with NCCL ready
  static constexpr std::size_t ctl_floats = ready_slot + 1 + controller::vote_floats;

  void plan_norms(const ring_session::info& ring, mine& m);
  void queue_own_norms(const ring_session::info& ring, mine& m);
  void read_own_norms(const ring_session::info& ring, mine& m);
  void precondition(const ring_session::info& ring);
  expected<double> sum_gradients(worker_context& ctx, const ring_session::info& ring, const mine& m,
                                 const replicas::round_vote& vote);
  void cast(worker_context& ctx, const ring_session::info& ring, const mine& m, bool exhausted);
  controller::round read_round(worker_context& ctx, const ring_session::info& ring, const mine& m,
                               double big_sqr, double share, float samples);
  void keep_for_pair(const ring_session::info& ring, const mine& m);
  void norms_failed(const error& e);

  expected<void> on_new_ring(worker_context& ctx, const ring_session::info& ring);
  expected<void> choose_path(const ring_session::info& ring);
  expected<void> build_comm(const ring_session::info& ring, const wire::gpu_comm_post& mine);
  expected<void> resync(worker_context& ctx, const ring_session::info& ring);
  expected<void> sync_nccl(std::uint64_t epoch, bool no_batch, float scale);
  expected<void> sync_host(worker_context& ctx, bool no_batch, float scale);
  step_result dropped(worker_context& ctx, const error& e);

  gpu_replica& g_;
  std::string self_;
  gpu_rendezvous_port& port_;
  bool estimate_;
  controller ctl_;
  nn::optimizer_config opt_;
  bool weighted_ = false;          // the reducer weighs by Adam's preconditioner
  std::uint64_t weighted_at_ = 0;  // the optimizer step its weights are of
  std::uint64_t steps_ = 0;
  std::uint64_t planned_epoch_ = 0;  // the ring epoch path_ was chosen for
  gpu::sync_path path_ = gpu::sync_path::single;
  std::vector<float> buf_;
  std::array<float, ctl_floats> ctl_buf_{};
  std::size_t prev_n_ = 0;  // the previous step's rows; when prev_ok_, its gradient is kept on the device
  bool prev_ok_ = false;
  int rank_ = 0;
  bool stepped_ = false;
};

// On the controller's rounds, before the compute: whether this rank's own norms are queued with it
// (a ring rank's |g|^2 of a full batch: a short one would make B_small wrong; alone, the pair with the
// previous step's kept gradient, both full, of equal rows), and Adam's weights refreshed when due
// (queued after the last optimizer step, which wrote the moments they are of).
void gpu_allreduce::plan_norms(const ring_session::info& ring, mine& m) {
  m.due = estimate_ && ctl_.norms_due();
  const bool pair = m.due && ring.size == 1 && prev_ok_ && !ring.fresh && m.full && m.n == prev_n_;
  prev_ok_ = false;
  if (!m.due || (ring.size == 1 && !pair)) return;
  precondition(ring);  // every rank of a ring alike, full batch or not: their estimates stay equal
  m.own = m.full && estimate_;
}

// Called by the compute once its backward is queued: the reductions and their readback queued on the
// stream, read by the loss readback's sync.
void gpu_allreduce::queue_own_norms(const ring_session::info& ring, mine& m) {
  auto& dev = *g_.trainer;
  if (auto q = g_.ops.queue_norms(dev.grads(), dev.dense_count(), ring.size == 1, dev.stream()); !q) {
    m.own = false;
    norms_failed(q.err());
  }
}

void gpu_allreduce::read_own_norms(const ring_session::info& ring, mine& m) {
  if (!m.own || !estimate_) return;
  const auto p = g_.ops.queued_norms();
  if (ring.size > 1) {
    m.small = p.sqr;
    return;
  }
  m.small = 0.5 * (p.sqr + p.kept_sqr);
  m.pair_big = 0.25 * (p.sqr + p.kept_sqr + 2.0 * p.cross);
}

// With Adam, the reducer's weights from the trainer's second moments when due (as
// goodput::preconditioner::refresh on the CPU path); the first time, the estimates start over (the
// plain and the preconditioned norms do not mix).
void gpu_allreduce::precondition(const ring_session::info& ring) {
  const auto moments = g_.trainer->adam_moments();
  if (opt_.type != "adam" || !moments.v ||
      !goodput::preconditioner_due(weighted_, weighted_at_, moments.step, ring.fresh))
    return;
  auto& dev = *g_.trainer;
  const auto inv_corr = goodput::adam_inv_correction(opt_.beta2, moments.step);
  if (auto p = g_.ops.precondition(moments.v, dev.dense_count(), g_.tensors, inv_corr,
                                   static_cast<float>(opt_.epsilon), static_cast<float>(1.0 - opt_.beta2),
                                   dev.stream());
      !p)
    return norms_failed(p.err());
  weighted_at_ = moments.step;
  if (!std::exchange(weighted_, true)) ctl_.norms_preconditioned();
}

// A ring's gradients averaged over NCCL (every rank's communicator ready) or host-staged; then, on a
// round that computes norms, |mean g|^2 (returned; 0 otherwise).
expected<double> gpu_allreduce::sum_gradients(worker_context& ctx, const ring_session::info& ring,
                                              const mine& m, const replicas::round_vote& vote) {
  if (vote.samples == 0.0f || ring.size <= 1) return 0.0;
  // Each rank's share of the average: its gradients are a mean over its n samples.
  const float scale = static_cast<float>(m.n) / vote.samples;
  auto synced = ctl_buf_[ready_slot] == vote.ranks ? sync_nccl(ring.epoch, m.n == 0, scale)
                                                   : sync_host(ctx, m.n == 0, scale);
  if (!synced) return synced.err();
  if (!m.due || !estimate_) return 0.0;
  auto& dev = *g_.trainer;
  auto r = g_.ops.sqr_norm(dev.grads(), dev.dense_count(), dev.stream());
  if (r) return *r;
  norms_failed(r.err());  // 0 and the estimator off
  return 0.0;
}

// A rank that cannot reduce on its device stops estimating: its votes carry no norms, so the ring's
// rounds give no estimate (every rank's are needed) and the learning rate keeps rank 0's word.
void gpu_allreduce::norms_failed(const error& e) {
  spdlog::warn("{}: gradient noise scale off on this rank: {}", self_, e.to_string());
  estimate_ = false;
}

// The round's vote, the ranks whose NCCL communicator is ready, then (in a ring) the controller's.
void gpu_allreduce::cast(worker_context& ctx, const ring_session::info& ring, const mine& m, bool exhausted) {
  ctl_buf_.fill(0.0f);
  replicas::round_vote::cast(ctl_buf_, static_cast<float>(m.n), exhausted);
  ctl_buf_[ready_slot] = g_.comms.current(ring.epoch) != nullptr ? 1.0f : 0.0f;
  if (ring.size > 1)
    ctl_.cast(std::span(ctl_buf_).subspan(ready_slot + 1), ring.rank, ring.size, m.full && estimate_, m.small,
              m.compute_s, ctx.data_epoch);
}

// The controller's round: the ring's votes, or alone this step and the previous one (read_round in
// allreduce.cpp, without micro-batches).
controller::round gpu_allreduce::read_round(worker_context& ctx, const ring_session::info& ring,
                                            const mine& m, double big_sqr, double share, float samples) {
  if (ring.size > 1)
    return ctl_.read(std::span<const float>(ctl_buf_).subspan(ready_slot + 1), ring.rank, ring.size,
                     ring.hosts, big_sqr, share, samples, ring.fresh, replicas::seconds_now(ctx));
  return ctl_.alone(m.full, m.small, m.pair_big, m.small.has_value(), m.compute_s, share, samples,
                    ctx.data_epoch, ring.fresh, replicas::seconds_now(ctx));
}

// Alone, when the next round computes norms: this step's gradient kept on the device for the pair
// (queued after the optimizer, which only reads it; the next backward comes after the copy).
void gpu_allreduce::keep_for_pair(const ring_session::info& ring, const mine& m) {
  if (!estimate_ || ring.size != 1 || !m.full || !ctl_.norms_due()) return;
  auto& dev = *g_.trainer;
  if (auto k = g_.ops.keep(dev.grads(), dev.dense_count(), dev.stream()); !k) return norms_failed(k.err());
  prev_ok_ = true;
  prev_n_ = m.n;
}

expected<void> gpu_allreduce::on_new_ring(worker_context& ctx, const ring_session::info& ring) {
  if (ring.size <= 1) {
    g_.comms.abort();  // a ring of one needs none; the last ring's peers are gone
    path_ = gpu::sync_path::single;
    planned_epoch_ = ring.epoch;
  } else if (planned_epoch_ != ring.epoch) {
    if (auto c = choose_path(ring); !c) return c;
  }
  return resync(ctx, ring);
}

// Every rank posts its device; all decide alike from the same posts. NCCL only when each rank has
// a GPU of its own; then rank 0 makes the unique id and every rank joins the communicator.
expected<void> gpu_allreduce::choose_path(const ring_session::info& ring) {
  wire::gpu_comm_post mine{ring.epoch,
                           static_cast<std::uint32_t>(ring.size),
                           {static_cast<std::uint32_t>(ring.rank), self_, g_.host, g_.device.uuid},
                           ""};
  auto s = port_.exchange(mine, false);
  if (!s) return s.err();
  std::vector<gpu::rank_device> ranks;
  for (const auto& p : s->posted) ranks.push_back({p.node, p.host, p.device_uuid});
  auto plan = gpu::plan_gradient_sync(ranks, true);
  g_.comms.abort();  // the previous epoch's communicator, whatever comes next
  path_ = plan.path;
  planned_epoch_ = ring.epoch;
  spdlog::info("{}: ring epoch {} ({} ranks): gradients {}: {}", self_, ring.epoch, ring.size,
               gpu::to_string(plan.path), plan.reason);
  if (plan.path != gpu::sync_path::nccl) return {};
  if (auto b = build_comm(ring, mine); !b) {
    // Not fatal: the control allreduce sees this rank not ready, and every rank stages via host.
    spdlog::warn("{}: NCCL for ring epoch {}: {}; host-staged allreduce instead", self_, ring.epoch,
                 b.err().to_string());
  }
  return {};
}

expected<void> gpu_allreduce::build_comm(const ring_session::info& ring, const wire::gpu_comm_post& mine) {
  auto post = mine;
  if (ring.rank == 0) {
    auto id = gpu::nccl_unique_id::create();
    if (!id) return id.err();
    post.unique_id = id->to_bytes();
  }
  auto s = port_.exchange(post, true);
  if (!s) return s.err();
  auto id = gpu::nccl_unique_id::from_bytes(s->unique_id);
  if (!id) return id.err();
  if (auto d = gpu::set_device(g_.ordinal); !d) return d;
  auto c = g_.comms.rebuild(ring.epoch, *id, ring.size, ring.rank);
  if (!c) return c.err();
  return {};
}

// The most trained replica's parameters and dense optimizer state to every rank, through the host
// and broadcasts on the CPU ring (replicas::sync_from_most_trained with the optimizer on the device).
// A resumed job's first ring starts from the latest ring checkpoint: its parameters and buffers (the
// device's optimizer state starts afresh) and the controller it kept. The goodput controller goes
// last, as on the CPU path: every rank (the source too) reads back the source's.
expected<void> gpu_allreduce::resync(worker_context& ctx, const ring_session::info& ring) {
  prev_ok_ = false;
  auto kept = ctl_.packed();
  if (ring.size <= 1) {
    replicas::restore_if_untrained(ctx, steps_, kept);
    ctl_.unpack(kept);  // as sync_from_most_trained's `extra` alone: the throughput measurement restarts
    return {};
  }
  auto src = replicas::vote_most_trained(ctx, ring, steps_);
  if (!src) return src.err();
  auto& dev = *g_.trainer;
  const bool source = ring.rank == src->rank;
  if (source) replicas::restore_if_untrained(ctx, src->steps, kept);
  if (source)
    if (auto d = ctx.backend.to_host(host_copy::parameters); !d) return d;
  std::size_t floats = 0;
  if (auto r = replicas::broadcast_parameters(ctx, src->rank, floats); !r) return r;
  const std::size_t ns = dev.slot_count();
  buf_.resize(ns + 1 + controller::sync_floats);  // optimizer slots, its step (exact to 2^24), controller
  const auto state = std::span(buf_).subspan(ns + 1);
  if (source) {
    std::uint64_t step = 0;
    if (auto d = dev.download_optimizer(std::span<float>(buf_.data(), ns), step); !d) return d;
    buf_[ns] = static_cast<float>(step);
    std::copy(kept.begin(), kept.end(), state.begin());  // the controller, or the checkpoint's
  }
  if (auto r = ctx.ring.broadcast(buf_, src->rank); !r) return r;
  ctl_.unpack(state);
  if (!source) {
    if (auto u = ctx.backend.from_host(host_copy::parameters); !u) return u;
    auto step = static_cast<std::uint64_t>(buf_[ns]);
    if (auto u = dev.upload_optimizer(std::span<const float>(buf_.data(), ns), step); !u) return u;
  }
  steps_ = src->steps;
  return {};
}

expected<void> gpu_allreduce::sync_nccl(std::uint64_t epoch, bool no_batch, float scale) {
  auto& dev = *g_.trainer;
  auto* comm = g_.comms.current(epoch);
  if (!comm) return make_unexpected(gpu::gpu_errc::peer_lost, "the NCCL communicator is gone");
  // A rank without a batch adds zeros (stale gradients times 0 could still be NaN).
  if (no_batch)
    if (auto z = g_.ops.zero(dev.grads(), dev.dense_count(), dev.stream()); !z) return z;
  auto r = comm->allreduce_sum(dev.grads(), dev.dense_count(), dev.stream(), scale);
  // Aborted: this epoch goes on host-staged (every rank then sees one rank not ready); the next
  // ring epoch gets a fresh communicator.
  if (!r) g_.comms.abort();
  return r;
}

expected<void> gpu_allreduce::sync_host(worker_context& ctx, bool no_batch, float scale) {
  auto& dev = *g_.trainer;
  auto host = g_.staging;
  if (host.size() != dev.dense_count())
    return make_unexpected(gpu::gpu_errc::unsupported, "staging buffer of " + std::to_string(host.size()) +
                                                           " floats for " +
                                                           std::to_string(dev.dense_count()));
  if (no_batch) {
    std::fill(host.begin(), host.end(), 0.0f);
  } else {
    if (auto d = g_.ops.to_host(host.data(), dev.grads(), host.size(), dev.stream()); !d) return d;
    if (auto s = dev.sync(); !s) return s;
    for (auto& v : host) v *= scale;
  }
  if (auto r = ctx.ring.allreduce(host); !r) return r;
  // Queued before the optimizer on the same stream; the next download comes after both.
  return g_.ops.to_device(dev.grads(), host.data(), host.size(), dev.stream());
}

step_result gpu_allreduce::dropped(worker_context& ctx, const error& e) {
  return replicas::drop_round(ctx, e, "allreduce (gpu): step");
}

}  // namespace

std::unique_ptr<strategy> make_device_allreduce(gpu_replica& g, const goodput::controller_options& o,
                                                const nn::optimizer_config& opt, bool estimate) {
  return std::make_unique<gpu_allreduce>(g, o, opt, estimate);
}

}  // namespace troupe::actors
