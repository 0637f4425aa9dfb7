// allreduce.cpp's algorithm on a device backend (backends/cuda_backend.hpp). Per step: gradients on
// the device; a 4-float control allreduce over the CPU ring (samples, exhausted, ranks, ranks whose
// NCCL communicator is ready); then the gradients summed, weighted by batch size, over NCCL (every
// rank ready) or host-staged (download to pinned memory, CPU ring allreduce, upload); then the
// optimizer on the device. Per ring epoch: the rendezvous through the master decides the path from
// the ranks' device uuids and hands out rank 0's NCCL unique id; the replicas are resynchronised
// from the most trained one via the host.
#include "allreduce_gpu.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>

#include "replicas.hpp"
#include "troupe/gpu/comm_plan.hpp"
#include "worker/backends/cuda_backend.hpp"

namespace troupe::actors {

namespace {

class gpu_allreduce final : public strategy {
 public:
  explicit gpu_allreduce(gpu_replica& g) : g_(g), self_(g.self), port_(*g.port) {}
  std::string_view name() const override { return "allreduce (gpu)"; }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    auto ring = ctx.ring.ensure();
    if (!ring) return {step_result::kind::retry};
    if (ring->fresh)
      if (auto s = on_new_ring(ctx, *ring); !s) return dropped(ctx, s.err());
    std::size_t n = b ? b->size() : 0;
    double loss = 0;
    if (b) {
      auto l = ctx.backend.compute_gradients(*b);
      if (!l) throw std::runtime_error(l.err().to_string());
      loss = *l;
    }
    bool ready = g_.comms.current(ring->epoch) != nullptr;
    // The round's vote, then how many ranks have this epoch's NCCL communicator ready.
    std::array<float, replicas::round_vote::floats + 1> ctl{};
    replicas::round_vote::cast(ctl, static_cast<float>(n), exhausted);
    ctl.back() = ready ? 1.0f : 0.0f;
    if (auto r = ctx.ring.allreduce(ctl); !r) return dropped(ctx, r.err());
    const replicas::round_vote vote(ctl);
    if (vote.samples == 0.0f) return {vote.empty_round()};
    // Each rank's share of the average: its gradients are a mean over its n samples.
    float scale = static_cast<float>(n) / vote.samples;
    if (ring->size > 1) {
      auto synced =
          ctl.back() == vote.ranks ? sync_nccl(ring->epoch, n == 0, scale) : sync_host(ctx, n == 0, scale);
      if (!synced) return dropped(ctx, synced.err());
    }
    ctx.backend.apply_gradients(vote.lr_scale(ctx.spec.nn.train.batch_size));
    ++steps_;
    return {step_result::kind::trained, n, loss};
  }

 private:
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
  std::uint64_t steps_ = 0;
  std::uint64_t planned_epoch_ = 0;  // the ring epoch path_ was chosen for
  gpu::sync_path path_ = gpu::sync_path::single;
  std::vector<float> buf_;
};

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
// device's optimizer state starts afresh).
expected<void> gpu_allreduce::resync(worker_context& ctx, const ring_session::info& ring) {
  if (ring.size <= 1) {
    replicas::restore_if_untrained(ctx, steps_);
    return {};
  }
  auto src = replicas::vote_most_trained(ctx, ring, steps_);
  if (!src) return src.err();
  auto& dev = *g_.trainer;
  const bool source = ring.rank == src->rank;
  if (source) replicas::restore_if_untrained(ctx, src->steps);
  if (source)
    if (auto d = ctx.backend.to_host(host_copy::parameters); !d) return d;
  std::size_t floats = 0;
  if (auto r = replicas::broadcast_parameters(ctx, src->rank, floats); !r) return r;
  const std::size_t ns = dev.slot_count();
  buf_.resize(ns + 1);  // optimizer slots, the optimizer's step (exact to 2^24)
  if (source) {
    std::uint64_t step = 0;
    if (auto d = dev.download_optimizer(std::span<float>(buf_.data(), ns), step); !d) return d;
    buf_[ns] = static_cast<float>(step);
  }
  if (auto r = ctx.ring.broadcast(buf_, src->rank); !r) return r;
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

std::unique_ptr<strategy> make_device_allreduce(gpu_replica& g) {
  return std::make_unique<gpu_allreduce>(g);
}

}  // namespace troupe::actors
