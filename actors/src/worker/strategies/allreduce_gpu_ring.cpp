// The allreduce strategy's device path, its ring side (allreduce_gpu_impl.hpp): per ring epoch the
// sync path chosen from the ranks' devices (NCCL or host-staged) and the communicator built, the
// replicas resynchronised from the most trained one (or from the ring's checkpoint when none had
// trained); per step the gradients summed.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "allreduce_gpu_impl.hpp"

namespace troupe::actors::device_path {

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
  if (ring.size <= 1) return resync_alone(ctx, kept);
  auto src = replicas::vote_most_trained(ctx, ring, steps_);
  if (!src) return src.err();
  auto& dev = *g_.trainer;
  const bool source = ring.rank == src->rank;
  std::uint64_t steps = src->steps;
  if (source) steps = replicas::restore_if_untrained(ctx, src->steps, kept);
  if (source)
    if (auto d = ctx.backend.to_host(host_copy::parameters); !d) return d;
  std::size_t floats = 0;
  if (auto r = replicas::broadcast_parameters(ctx, src->rank, floats); !r) return r;
  // The optimizer slots, its step (exact to 2^24), the ring's steps (restored from a checkpoint:
  // its step; in two floats of 24 bits, exact), the controller.
  const std::size_t ns = dev.slot_count();
  buf_.resize(ns + 3 + controller::sync_floats);
  const auto state = std::span(buf_).subspan(ns + 3);
  if (source) {
    std::uint64_t step = 0;
    if (auto d = dev.download_optimizer(std::span<float>(buf_.data(), ns), step); !d) return d;
    buf_[ns] = static_cast<float>(step);
    replicas::pack_count(steps, std::span(buf_).subspan(ns + 1, 2));
    std::copy(kept.begin(), kept.end(), state.begin());  // the controller, or the checkpoint's
  }
  if (auto r = ctx.ring.broadcast(buf_, src->rank); !r) return r;
  ctl_.unpack(state);
  if (!source) {
    if (auto u = ctx.backend.from_host(host_copy::parameters); !u) return u;
    auto step = static_cast<std::uint64_t>(buf_[ns]);
    if (auto u = dev.upload_optimizer(std::span<const float>(buf_.data(), ns), step); !u) return u;
  }
  steps_ = replicas::unpack_count(std::span<const float>(buf_).subspan(ns + 1, 2));
  if (src->steps == 0) replicas::restarted(ctx, steps_);  // no replica had trained: every rank's held tasks
  return {};
}

// A ring of one: from the ring's checkpoint when its replica has not trained.
expected<void> gpu_allreduce::resync_alone(worker_context& ctx, std::vector<float>& kept) {
  const bool trained = steps_ > 0;
  steps_ = replicas::restore_if_untrained(ctx, steps_, kept);
  ctl_.unpack(kept);  // as sync_from_most_trained's `extra` alone: the throughput measurement restarts
  if (!trained) replicas::restarted(ctx, steps_);
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

}  // namespace troupe::actors::device_path
