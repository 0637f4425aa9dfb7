// Synchronous data-parallel SGD: every worker computes the gradients of its minibatch, the ring of
// alive workers sums them (weighted by batch size) and every replica applies the same averaged
// update. A worker without data still takes part (with zero weight), so peers never wait for it;
// a round with fewer samples than a full batch from every rank takes a proportionally smaller
// step (round_vote::lr_scale).
// The same allreduce carries the gradient noise scale's statistics and the goodput controller's
// word (goodput/controller.hpp, docs/goodput.md): the learning rate's scaling rule ([train]
// lr_scaling) and, with [train] batch = "auto" (or "global": the job file's global batch at every
// ring size), the batch each worker cuts per step, which the strategy splits into micro-batches of
// at most max_local_batch (gradient accumulation).
// A membership change interrupts the collective: the step is dropped, the new ring is built, the
// most trained replica's model, optimizer state and controller go to every replica, and training
// goes on. One exception: when the other worker of a ring of two dies mid-step, the survivor is the
// whole ring, its own gradients are the average, and it finishes the step alone instead of
// dropping it.
// On a backend with a device (CUDA) the same algorithm runs on the device: allreduce_gpu.cpp, with
// its own controller (the norms reduced on the device; no gradient accumulation, no batch = "auto").
#include <spdlog/spdlog.h>

#include <optional>

#include "allreduce_gpu.hpp"
#include "grad_norms.hpp"
#include "replicas.hpp"
#include "troupe/actors/strategy.hpp"
#include "worker/goodput/controller.hpp"

namespace troupe::actors {

namespace {

using goodput::controller;

goodput::controller_options controller_options_of(const job::job_spec& spec) {
  const auto& t = spec.nn.train;
  goodput::controller_options o;
  o.rule = goodput::parse_lr_rule(t.lr_scaling);
  o.adaptive = t.optimizer.type == "adam" || t.optimizer.type == "adagrad";
  o.auto_batch = t.batch == "auto";
  o.global_batch = t.batch == "global";
  o.batch_size = t.batch_size;
  o.base_batch = static_cast<double>(std::max<std::uint32_t>(1, spec.job.workers)) * t.batch_size;
  o.limits.max_batch = t.max_batch > 0 ? static_cast<double>(t.max_batch) : 16 * o.base_batch;
  o.limits.max_atomic = static_cast<double>(t.max_local_batch);
  o.limits.max_local = static_cast<double>(spec.job.records_per_task);
  // Two rows a replica at the least, whatever the ring (a batch norm module fails on one row; none
  // can be folded into another where every batch is one): more replicas than M0 train 2 rows each,
  // past M0 (and max_batch); the micro-batches of a share of 2 or more are 2 or more.
  o.limits.min_atomic = std::min<double>(2, static_cast<double>(t.batch_size));
  o.estimate_every = static_cast<std::uint32_t>(t.noise_scale_every);
  return o;
}

class allreduce final : public strategy {
 public:
  explicit allreduce(const job::job_spec& spec)
      : estimate_(spec.nn.train.noise_scale),
        ctl_(controller_options_of(spec)),
        pre_(spec.nn.train.optimizer) {}
  std::string_view name() const override { return "allreduce"; }
  bool steps_outlive_worker() const override { return true; }  // every replica applies every step
  void warm_up(worker_context& ctx) override {
    if (ctx.backend.device()) return;
    replicas::reserve_state(ctx, true, sync_buf_);
    buf_.assign(ctx.backend.gradients().size() + tail(), 0.0f);
  }
  wire::goodput_report goodput() const override {
    if (device_) return device_->goodput();
    if (!estimate_ || !stepped_) return {};
    auto g = ctl_.report();
    g.ring_rank = static_cast<std::uint32_t>(rank_);
    return g;
  }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    if (auto* g = ctx.backend.device()) {
      if (!device_) device_ = make_device_allreduce(*g, ctl_.options(), pre_.config(), estimate_);
      return device_->step(ctx, b, exhausted);
    }
    auto ring = ctx.ring.ensure();
    if (!ring) return {step_result::kind::retry};
    if (ring->fresh) {
      if (auto s = resync(ctx, *ring); !s) return replicas::drop_round(ctx, s.err(), "allreduce: step");
      // The batch offered was cut after rows the replicas lost (worker_context::replicas_restarted):
      // the worker offers the task's first batch instead.
      if (ctx.offered_batch_stale) return {step_result::kind::retry};
    }
    rank_ = ring->rank;
    stepped_ = true;
    const double t0 = replicas::seconds_now(ctx);
    const auto [norms, pair] = plan_norms(ctx, *ring, b);
    const auto weights = pre_.weights();
    auto grads = ctx.backend.gradients();
    const std::size_t total = grads.size();
    const filled f = fill_buffer(ctx, b, grads, weights, exhausted, *ring, t0, norms, pair);
    if (auto r = ctx.ring.allreduce(buf_); !r) {
      if (b && ctx.ring.alone()) return finish_alone(ctx, *b, r.err(), f.parts);
      return replicas::drop_round(ctx, r.err(), "allreduce: step");
    }
    const replicas::round_vote vote{std::span(buf_).subspan(total)};
    const float samples = vote.samples;
    // |mean g|^2: in a ring, and alone from accumulated micro-batches (a pair uses its own).
    const double big_sqr =
        samples > 0.0f ? goodput::average_out(grads, buf_, samples, weights, norms && !pair) : 0.0;
    const double share = replicas::step_share(samples, vote.ranks, static_cast<std::size_t>(f.cfg.local()));
    const auto round = read_round(ctx, *ring, grads, f, big_sqr, share, samples);
    if (samples == 0.0f) return {vote.empty_round()};
    ctx.backend.apply_gradients(share * round.lr_factor);
    // buf_ keeps this step's sum until the next step's fill: a lone replica's next pair reads it.
    prev_ok_ = ring->size == 1 && f.full && f.cfg.accum == 0;
    ctl_.step_done(replicas::seconds_now(ctx) - t0, f.full);
    ctx.local_batch = local_batch();
    return {step_result::kind::trained, f.n, f.loss};
  }

 private:
  // Whether this step computes the squared norms: on the controller's rounds only (1 in
  // noise_scale_every); alone without micro-batches, as a pair with the previous step, whose sum is
  // still in buf_ (prev_ok_). The preconditioner refreshed for them.
  struct norms_plan {
    bool norms = false, pair = false;
  };
  norms_plan plan_norms(worker_context& ctx, const ring_session::info& ring, const nn::batch* b) {
    const bool due = estimate_ && ctl_.norms_due();
    const bool accumulated = ctl_.batch().accum > 0;
    norms_plan p;
    p.pair = due && ring.size == 1 && !accumulated && prev_ok_ && !ring.fresh && b && b->size() == prev_n_;
    p.norms = due && (ring.size > 1 || accumulated || p.pair);
    prev_ok_ = false;
    prev_n_ = b ? b->size() : 0;  // for the next step (a pair needs this one's rows equal: they are)
    if (p.norms && pre_.refresh(ctx.backend, ring.fresh)) ctl_.norms_preconditioned();
    return p;
  }
  // What fill_buffer computed: the controller's batch then, the batch's rows, its micro-batches,
  // their mean |g|^2 (when `norms`), the compute time per micro-batch, whether the batch was the
  // controller's full size, and the mean loss.
  struct filled {
    goodput::batch_config cfg;
    std::size_t n = 0, parts = 0;
    double small_sqr = 0, compute_s = 0;
    bool full = false, norms = false;
    double loss = 0;
    std::optional<goodput::pair_norms> pair;  // alone: this step's and the previous one's norms
    std::optional<double> small() const { return norms ? std::optional<double>(small_sqr) : std::nullopt; }
  };
  // buf_: the gradients of the batch in micro-batches of the controller's size (one, unless the
  // batch is accumulated), weighted by their rows (zeros without a batch: the backend's gradients
  // are not this round's then), then this worker's vote for the round and the controller's word.
  filled fill_buffer(worker_context& ctx, const nn::batch* b, std::span<float> grads,
                     std::span<const float> weights, bool exhausted, const ring_session::info& ring,
                     double t0, bool norms, bool pair) {
    const std::size_t total = grads.size();
    buf_.resize(total + tail());
    filled f;
    f.norms = norms;
    f.cfg = ctl_.batch();
    const auto& cfg = f.cfg;
    const std::size_t atomic = static_cast<std::size_t>(std::max(1, cfg.atomic));
    f.n = b ? b->size() : 0;
    f.full = b && f.n == static_cast<std::size_t>(cfg.local());
    for (std::size_t at = 0, m = 0; b && at < f.n; at += m, ++f.parts) {
      m = micro_rows(f.n, at, atomic);
      f.full = f.full && m == atomic;
      auto l = ctx.backend.compute_gradients(micro(*b, at, m));
      if (!l) throw std::runtime_error(l.err().to_string());
      f.loss += *l * static_cast<double>(m);
      if (pair && at == 0 && m == f.n)
        f.pair = goodput::weigh_pair_into(buf_, grads, static_cast<float>(m), static_cast<float>(prev_n_),
                                          weights);
      else
        f.small_sqr += goodput::weigh_into(buf_, grads, static_cast<float>(m), at == 0, weights, norms);
    }
    if (f.n > 0) f.loss /= static_cast<double>(f.n);
    if (f.n > 0 && ctx.pace) ctx.pace(f.n, t0);  // a paced worker's pace is its compute time
    last_loss_ = f.loss;
    if (!b) std::fill(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(total), 0.0f);
    f.compute_s = f.parts > 0 ? (replicas::seconds_now(ctx) - t0) / static_cast<double>(f.parts) : 0.0;
    if (f.parts > 0) f.small_sqr /= static_cast<double>(f.parts);
    auto tail_span = std::span(buf_).subspan(total);
    replicas::round_vote::cast(tail_span, static_cast<float>(f.n), exhausted);
    if (ring.size > 1)
      ctl_.cast(tail_span.subspan(replicas::round_vote::floats), ring.rank, ring.size, f.full && estimate_,
                f.small(), f.compute_s, ctx.data_epoch);
    return f;
  }
  // The controller's round: the ring's votes, or, in a ring of one, the micro-batches of this step
  // (accumulated) or this step and the previous one.
  controller::round read_round(worker_context& ctx, const ring_session::info& ring,
                               std::span<const float> grads, const filled& f, double big_sqr, double share,
                               float samples) {
    const std::size_t total = grads.size();
    if (ring.size > 1)
      return ctl_.read(std::span(buf_).subspan(total + replicas::round_vote::floats), ring.rank, ring.size,
                       ring.hosts, big_sqr, share, samples, ring.fresh, replicas::seconds_now(ctx));
    if (f.cfg.accum > 0)
      return ctl_.alone(f.full, f.small(), big_sqr, false, f.compute_s, share, samples, ctx.data_epoch,
                        ring.fresh, replicas::seconds_now(ctx));
    return ctl_.alone(f.full, f.pair ? std::optional<double>(f.pair->small()) : std::nullopt,
                      f.pair ? f.pair->big() : 0.0, f.pair.has_value(), f.compute_s, share, samples,
                      ctx.data_epoch, ring.fresh, replicas::seconds_now(ctx));
  }
  // The batch the worker cuts per step: the controller's when it sets it (batch = "auto" or
  // "global"), else the job file's (0).
  std::size_t local_batch() const {
    const auto& o = ctl_.options();
    return o.auto_batch || o.global_batch ? static_cast<std::size_t>(ctl_.batch().local()) : 0;
  }
  std::size_t tail() const { return replicas::round_vote::floats + controller::vote_floats; }
  // The rows of the micro-batch at `at` of a batch of `n`: `atomic`, the last one fewer, and one
  // more where a single row would be left (a module that cannot train on one row failed there).
  static std::size_t micro_rows(std::size_t n, std::size_t at, std::size_t atomic) {
    const std::size_t m = std::min(atomic, n - at);
    return m > 1 && n - at - m == 1 ? m + 1 : m;
  }
  static nn::batch micro(const nn::batch& b, std::size_t at, std::size_t m) {
    return at == 0 && m == b.size() ? b : b.sub(at, m);
  }
  // Every replica applies every step, and its checkpoint's meta counts them: the host trainer's
  // optimizer steps, or the device path's count (its host trainer does not step). A device backend
  // before its path's first step: none yet.
  std::uint64_t checkpointed_step(worker_context& ctx) const override {
    if (device_) return device_->checkpointed_step(ctx);
    return ctx.backend.device() ? 0 : replicas::optimizer_steps(ctx.backend);
  }
  std::vector<float> durable_state() const override {
    return device_ ? device_->durable_state() : ctl_.packed();
  }
  expected<void> resync(worker_context& ctx, const ring_session::info& ring) {
    auto state = ctl_.packed();
    auto s = replicas::sync_from_most_trained(ctx, ring, true, sync_buf_, state);
    if (!s) return s;
    ctl_.unpack(state);
    prev_ok_ = false;
    ctx.local_batch = local_batch();
    return {};
  }
  // The survivor of a ring of two whose partner died mid-step finishes the step with its own
  // gradients (the ring's average now): computed again, the collective may have overwritten buf_.
  step_result finish_alone(worker_context& ctx, const nn::batch& b, const error& why, std::size_t parts);

  bool estimate_;
  controller ctl_;
  goodput::preconditioner pre_;
  std::vector<float> buf_, sync_buf_;
  std::size_t prev_n_ = 0;  // the previous step's rows; when prev_ok_, its sum is still in buf_
  bool prev_ok_ = false;
  double last_loss_ = 0;
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
    for (std::size_t at = 0, m = 0; at < n; at += m) {
      m = micro_rows(n, at, atomic);
      if (auto l = ctx.backend.compute_gradients(micro(b, at, m)); !l)
        throw std::runtime_error(l.err().to_string());
      goodput::weigh_into(buf_, grads, static_cast<float>(m), at == 0, {}, false);
    }
    goodput::average_out(grads, std::span<const float>(buf_.data(), grads.size()), static_cast<float>(n), {},
                         false);
  }
  const double share = replicas::step_share(static_cast<double>(n), 1, static_cast<std::size_t>(cfg.local()));
  const auto round = ctl_.alone(false, std::nullopt, 0, false, 0, share, static_cast<double>(n),
                                ctx.data_epoch, true, replicas::seconds_now(ctx));
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
