// Synchronous data-parallel SGD: every worker computes the gradients of its minibatch, the ring of
// alive workers sums them (weighted by batch size) and every replica applies the same averaged
// update. A worker without data still takes part (with zero weight), so peers never wait for it;
// a round with fewer samples than a full batch from every rank takes a proportionally smaller
// step (round_vote::lr_scale).
// The same allreduce carries the gradient noise scale's statistics and the goodput controller's
// word (goodput/controller.hpp, docs/goodput.md): the learning rate's scaling rule ([train]
// lr_scaling) and, with [train] batch = "auto", the batch each worker cuts per step, which the
// strategy splits into micro-batches of at most max_local_batch (gradient accumulation).
// A membership change interrupts the collective: the step is dropped, the new ring is built, the
// most trained replica's model, optimizer state and controller go to every replica, and training
// goes on. One exception: when the other worker of a ring of two dies mid-step, the survivor is the
// whole ring, its own gradients are the average, and it finishes the step alone instead of
// dropping it.
// On a backend with a device (CUDA) the same algorithm runs on the device: allreduce_gpu.cpp (its
// learning rate is not scaled and it estimates no noise scale yet).
#include <spdlog/spdlog.h>

#include <optional>

#include "allreduce_gpu.hpp"
#include "replicas.hpp"
#include "troupe/actors/strategy.hpp"
#include "worker/goodput/controller.hpp"
#include "worker/goodput/grad_norms.hpp"

namespace troupe::actors {

namespace {

using goodput::controller;

goodput::controller_options controller_options_of(const job::job_spec& spec) {
  const auto& t = spec.nn.train;
  goodput::controller_options o;
  o.rule = goodput::parse_lr_rule(t.lr_scaling);
  o.adaptive = t.optimizer.type == "adam" || t.optimizer.type == "adagrad";
  o.auto_batch = t.batch == "auto";
  o.batch_size = t.batch_size;
  o.base_batch = static_cast<double>(std::max<std::uint32_t>(1, spec.job.workers)) * t.batch_size;
  o.limits.max_batch = t.max_batch > 0 ? static_cast<double>(t.max_batch) : 16 * o.base_batch;
  o.limits.max_atomic = static_cast<double>(t.max_local_batch);
  o.limits.max_local = static_cast<double>(spec.job.records_per_task);
  return o;
}

class allreduce final : public strategy {
 public:
  explicit allreduce(const job::job_spec& spec)
      : estimate_(spec.nn.train.noise_scale),
        ctl_(controller_options_of(spec)),
        pre_(spec.nn.train.optimizer) {}
  std::string_view name() const override { return "allreduce"; }
  void warm_up(worker_context& ctx) override {
    if (ctx.backend.device()) return;
    replicas::reserve_state(ctx, true, sync_buf_);
    buf_.assign(ctx.backend.gradients().size() + tail(), 0.0f);
  }
  wire::goodput_report goodput() const override {
    if (!estimate_ || !stepped_) return {};
    auto g = ctl_.report();
    g.ring_rank = static_cast<std::uint32_t>(rank_);
    return g;
  }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    if (auto* g = ctx.backend.device()) {
      if (!device_) device_ = make_device_allreduce(*g);
      return device_->step(ctx, b, exhausted);
    }
    auto ring = ctx.ring.ensure();
    if (!ring) return {step_result::kind::retry};
    if (ring->fresh) {
      if (auto s = resync(ctx, *ring); !s) return replicas::drop_round(ctx, s.err(), "allreduce: step");
    }
    rank_ = ring->rank;
    stepped_ = true;
    const double t0 = now(ctx);
    if (estimate_ && pre_.refresh(ctx.backend, ring->fresh)) ctl_.reset_estimates();
    const auto weights = pre_.weights();
    double loss = 0;
    std::size_t n = b ? b->size() : 0;
    auto grads = ctx.backend.gradients();
    const std::size_t total = grads.size();
    buf_.resize(total + tail());
    // The batch in micro-batches of the controller's size (one, unless the batch is accumulated).
    const auto cfg = ctl_.batch();
    const std::size_t atomic = static_cast<std::size_t>(std::max(1, cfg.atomic));
    std::size_t parts = 0;
    double small_sqr = 0;
    bool full = b && n == static_cast<std::size_t>(cfg.local());
    for (std::size_t at = 0; b && at < n; at += atomic, ++parts) {
      const std::size_t m = std::min(atomic, n - at);
      full = full && m == atomic;
      auto l = ctx.backend.compute_gradients(micro(*b, at, m));
      if (!l) throw std::runtime_error(l.err().to_string());
      loss += *l * static_cast<double>(m);
      small_sqr += goodput::weigh_into(buf_, grads, static_cast<float>(m), at == 0, weights, estimate_);
    }
    if (n > 0) loss /= static_cast<double>(n);
    last_loss_ = loss;
    if (!b) std::fill(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(total), 0.0f);
    const double compute_s = parts > 0 ? (now(ctx) - t0) / static_cast<double>(parts) : 0.0;
    if (parts > 0) small_sqr /= static_cast<double>(parts);
    auto tail_span = std::span(buf_).subspan(total);
    replicas::round_vote::cast(tail_span, static_cast<float>(n), exhausted);
    if (ring->size > 1)
      ctl_.cast(tail_span.subspan(replicas::round_vote::floats), ring->rank, ring->size, full && estimate_,
                small_sqr, compute_s, ctx.data_epoch);
    if (auto r = ctx.ring.allreduce(buf_); !r) {
      if (b && ctx.ring.alone()) return finish_alone(ctx, *b, r.err(), parts);
      return replicas::drop_round(ctx, r.err(), "allreduce: step");
    }
    const replicas::round_vote vote{tail_span};
    const float samples = vote.samples;
    const double big_sqr =
        samples > 0.0f ? goodput::average_out(grads, buf_, samples, weights, estimate_) : 0.0;
    const double share = replicas::step_share(samples, vote.ranks, static_cast<std::size_t>(cfg.local()));
    controller::round round;
    if (ring->size > 1) {
      round = ctl_.read(tail_span.subspan(replicas::round_vote::floats), ring->rank, ring->size, ring->hosts,
                        big_sqr, share, samples, ring->fresh, now(ctx));
    } else {
      // A ring of one: micro-batches of this step, or this step and the previous one.
      const bool pair = full && cfg.accum == 0 && prev_n_ == n && !ring->fresh;
      double pair_small = 0, pair_big = 0;
      if (estimate_ && full && cfg.accum == 0) {
        prev_.resize(total);
        pair_small = 0.5 * (small_sqr + prev_sqr_);
        pair_big = goodput::pair_sqr_and_keep(grads, prev_, weights);
        prev_sqr_ = small_sqr;
        prev_n_ = n;
      } else {
        prev_n_ = 0;
      }
      round = cfg.accum > 0 ? ctl_.alone(full, small_sqr, big_sqr, false, compute_s, share, samples,
                                         ctx.data_epoch, ring->fresh, now(ctx))
                            : ctl_.alone(full, pair_small, pair_big, pair, compute_s, share, samples,
                                         ctx.data_epoch, ring->fresh, now(ctx));
    }
    if (samples == 0.0f) return {vote.empty_round()};
    ctx.backend.apply_gradients(share * round.lr_factor);
    ctl_.step_done(now(ctx) - t0, full);
    ctx.local_batch = ctl_.options().auto_batch ? static_cast<std::size_t>(ctl_.batch().local()) : 0;
    return {step_result::kind::trained, n, loss};
  }

 private:
  std::size_t tail() const { return replicas::round_vote::floats + controller::vote_floats; }
  static nn::batch micro(const nn::batch& b, std::size_t at, std::size_t m) {
    return at == 0 && m == b.size() ? b : b.sub(at, m);
  }
  static double now(worker_context& ctx) {
    auto& c = ctx.clock ? *ctx.clock : troupe::clock::system();
    return std::chrono::duration<double>(c.now().time_since_epoch()).count();
  }
  expected<void> resync(worker_context& ctx, const ring_session::info& ring) {
    std::vector<float> state(controller::sync_floats);
    ctl_.pack(state);
    auto s = replicas::sync_from_most_trained(ctx, ring, true, sync_buf_, state);
    if (!s) return s;
    ctl_.unpack(state);
    prev_n_ = 0;
    ctx.local_batch = ctl_.options().auto_batch ? static_cast<std::size_t>(ctl_.batch().local()) : 0;
    return {};
  }
  // The survivor of a ring of two whose partner died mid-step finishes the step with its own
  // gradients (the ring's average now): computed again, the collective may have overwritten buf_.
  step_result finish_alone(worker_context& ctx, const nn::batch& b, const error& why, std::size_t parts);

  bool estimate_;
  controller ctl_;
  goodput::preconditioner pre_;
  std::vector<float> buf_, sync_buf_, prev_;
  std::size_t prev_n_ = 0;
  double prev_sqr_ = 0, last_loss_ = 0;
  int rank_ = 0;
  bool stepped_ = false;
  std::unique_ptr<strategy> device_;  // the device path (a backend with a GPU)
};

step_result allreduce::finish_alone(worker_context& ctx, const nn::batch& b, const error& why,
                                    std::size_t parts) {
  // One micro-batch: the backend still holds its gradients (the collective summed a copy). Several:
  // the collective may have left garbage in buf_, so they are computed again and averaged.
  auto grads = ctx.backend.gradients();
  const auto cfg = ctl_.batch();
  const std::size_t n = b.size();
  if (parts > 1) {
    const std::size_t atomic = static_cast<std::size_t>(std::max(1, cfg.atomic));
    for (std::size_t at = 0; at < n; at += atomic) {
      const std::size_t m = std::min(atomic, n - at);
      if (auto l = ctx.backend.compute_gradients(micro(b, at, m)); !l)
        throw std::runtime_error(l.err().to_string());
      goodput::weigh_into(buf_, grads, static_cast<float>(m), at == 0, {}, false);
    }
    goodput::average_out(grads, std::span<const float>(buf_.data(), grads.size()), static_cast<float>(n), {},
                         false);
  }
  const double share = replicas::step_share(static_cast<double>(n), 1, static_cast<std::size_t>(cfg.local()));
  const auto round =
      ctl_.alone(false, 0, 0, false, 0, share, static_cast<double>(n), ctx.data_epoch, true, now(ctx));
  ctx.backend.apply_gradients(share * round.lr_factor);
  spdlog::info("allreduce: step finished alone ({})", why.to_string());
  return {step_result::kind::trained, n, last_loss_};
}

}  // namespace

void register_allreduce_strategy() {
  static strategy_registrar reg("allreduce",
                                [](const job::job_spec& spec) { return std::make_unique<allreduce>(spec); });
}

}  // namespace troupe::actors
