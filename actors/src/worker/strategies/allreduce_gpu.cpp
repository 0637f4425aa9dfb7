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
// The ring side (path, communicators, resync, the gradient sum) is allreduce_gpu_ring.cpp.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

#include "allreduce_gpu_impl.hpp"
#include "grad_norms.hpp"

namespace troupe::actors {

namespace device_path {

step_result gpu_allreduce::step(worker_context& ctx, const nn::batch* b, bool exhausted) {
  auto ring = ctx.ring.ensure();
  if (!ring) return {step_result::kind::retry};
  if (ring->fresh) {
    if (auto s = on_new_ring(ctx, *ring); !s) return dropped(ctx, s.err());
    // The batch offered was cut after rows the replicas lost (worker_context::replicas_restarted):
    // the worker offers the task's first batch instead.
    if (ctx.offered_batch_stale) return {step_result::kind::retry};
  }
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

}  // namespace device_path

std::unique_ptr<strategy> make_device_allreduce(gpu_replica& g, const goodput::controller_options& o,
                                                const nn::optimizer_config& opt, bool estimate) {
  return std::make_unique<device_path::gpu_allreduce>(g, o, opt, estimate);
}

}  // namespace troupe::actors
