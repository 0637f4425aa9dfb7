// The allreduce strategy's device path (allreduce_gpu.cpp: its step and the noise scale's norms;
// allreduce_gpu_ring.cpp: the ring's sync path, communicators, resynchronisation and gradient sum).
#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "allreduce_gpu.hpp"
#include "replicas.hpp"
#include "troupe/gpu/comm_plan.hpp"
#include "worker/backends/cuda_backend.hpp"

namespace troupe::actors::device_path {

using goodput::controller;

// No batch = "auto" on the device path (no gradient accumulation): the job file's batch_size.
inline goodput::controller_options fixed_batch(goodput::controller_options o) {
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
  // The ring's steps: every replica applies each one (and takes the source's count at a resync), a
  // checkpoint's download waits for the steps queued before it, and a replica restored from one
  // counts on from its step.
  std::uint64_t checkpointed_step(worker_context&) const override { return steps_; }
  std::vector<float> durable_state() const override { return ctl_.packed(); }
  wire::goodput_report goodput() const override {
    if (!estimate_ || !stepped_) return {};
    auto r = ctl_.report();
    r.ring_rank = static_cast<std::uint32_t>(rank_);
    return r;
  }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override;

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
  expected<void> resync_alone(worker_context& ctx, std::vector<float>& kept);
  expected<void> sync_nccl(std::uint64_t epoch, bool no_batch, float scale);
  expected<void> sync_host(worker_context& ctx, bool no_batch, float scale);
  step_result dropped(worker_context& ctx, const error& e);

  gpu_replica& g_;
  std::string self_;
  gpu_rendezvous_port& port_;
  bool estimate_;
  controller ctl_;
  nn::optimizer_config opt_;
  bool weighted_ = false;            // the reducer weighs by Adam's preconditioner
  std::uint64_t weighted_at_ = 0;    // the optimizer step its weights are of
  std::uint64_t steps_ = 0;          // the ring's steps this replica holds (checkpointed_step)
  std::uint64_t planned_epoch_ = 0;  // the ring epoch path_ was chosen for
  gpu::sync_path path_ = gpu::sync_path::single;
  std::vector<float> buf_;
  std::array<float, ctl_floats> ctl_buf_{};
  std::size_t prev_n_ = 0;  // the previous step's rows; when prev_ok_, its gradient is kept on the device
  bool prev_ok_ = false;
  int rank_ = 0;
  bool stepped_ = false;
};

}  // namespace troupe::actors::device_path
