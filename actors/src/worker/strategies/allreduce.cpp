// Synchronous data-parallel SGD: every worker computes the gradients of its minibatch, the ring of
// alive workers sums them (weighted by batch size) and every replica applies the same averaged
// update. A worker without data still takes part (with zero weight), so peers never wait for it;
// a round with fewer samples than a full batch from every rank takes a proportionally smaller
// step (round_vote::lr_scale).
// A membership change interrupts the collective: the step is dropped, the new ring is built, the
// most trained replica's model and optimizer state go to every replica, and training goes on. One
// exception: when the other worker of a ring of two dies mid-step, the survivor is the whole ring,
// its own gradients are the average, and it finishes the step alone instead of dropping it.
// On a backend with a device (CUDA) the same algorithm runs on the device: allreduce_gpu.cpp.
#include <spdlog/spdlog.h>

#include "allreduce_gpu.hpp"
#include "replicas.hpp"
#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

namespace {

class allreduce final : public strategy {
 public:
  std::string_view name() const override { return "allreduce"; }
  void warm_up(worker_context& ctx) override {
    if (ctx.backend.device()) return;
    replicas::reserve_state(ctx, true, sync_buf_);
    buf_.assign(ctx.backend.gradients().size() + replicas::round_vote::floats, 0.0f);
  }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    if (auto* g = ctx.backend.device()) {
      if (!device_) device_ = make_device_allreduce(*g);
      return device_->step(ctx, b, exhausted);
    }
    auto ring = ctx.ring.ensure();
    if (!ring) return {step_result::kind::retry};
    if (ring->fresh) {
      if (auto s = replicas::sync_from_most_trained(ctx, *ring, true, sync_buf_); !s)
        return replicas::drop_round(ctx, s.err(), "allreduce: step");
    }
    double loss = 0;
    std::size_t n = b ? b->size() : 0;
    if (b) {
      auto l = ctx.backend.compute_gradients(*b);
      if (!l) throw std::runtime_error(l.err().to_string());
      loss = *l;
    }
    auto grads = ctx.backend.gradients();
    const std::size_t total = grads.size();
    fill_buffer(grads, b != nullptr, n, exhausted);
    if (auto r = ctx.ring.allreduce(buf_); !r) {
      if (b && ctx.ring.alone()) {
        // buf_ was a copy: the backend still holds this batch's gradients, untouched by the ring,
        // which is now this worker alone.
        ctx.backend.apply_gradients(
            replicas::step_share(static_cast<double>(n), 1, ctx.spec.nn.train.batch_size));
        spdlog::info("allreduce: step finished alone ({})", r.err().to_string());
        return {step_result::kind::trained, n, loss};
      }
      return replicas::drop_round(ctx, r.err(), "allreduce: step");
    }
    const replicas::round_vote vote{std::span(buf_).subspan(total)};
    const float samples = vote.samples;
    if (samples == 0.0f) return {vote.empty_round()};
    for (std::size_t i = 0; i < total; ++i) grads[i] = buf_[i] / samples;
    ctx.backend.apply_gradients(vote.lr_scale(ctx.spec.nn.train.batch_size));
    return {step_result::kind::trained, n, loss};
  }

 private:
  // buf_: the gradients weighted by the batch's `n` rows (zeros without a batch: the backend's
  // gradients are not this round's then), then this worker's vote for the round.
  void fill_buffer(std::span<const float> grads, bool has_batch, std::size_t n, bool exhausted) {
    const std::size_t total = grads.size();
    buf_.resize(total + replicas::round_vote::floats);
    for (std::size_t i = 0; i < total; ++i) buf_[i] = has_batch ? grads[i] * static_cast<float>(n) : 0.0f;
    replicas::round_vote::cast(std::span(buf_).subspan(total), static_cast<float>(n), exhausted);
  }

  std::vector<float> buf_, sync_buf_;
  std::unique_ptr<strategy> device_;  // the device path (a backend with a GPU)
};

}  // namespace

void register_allreduce_strategy() {
  static strategy_registrar reg("allreduce",
                                [](const job::job_spec&) { return std::make_unique<allreduce>(); });
}

}  // namespace troupe::actors
