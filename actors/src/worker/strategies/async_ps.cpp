// Asynchronous SGD on parameter servers (ElasticDL's default): pull the parameters a minibatch
// needs, compute gradients, push them; the shards apply the optimizer. Workers never wait for each
// other, so one dying costs nothing but its task.
// With [train] noise_scale (docs/goodput.md), the gradient noise scale is the PS shards': each
// estimates its slice's from the pushes it receives (ps/push_noise.hpp) and answers each push with
// it; the worker reports their sum once every shard holding dense tensors has one. Until then, each
// worker's own estimate from its consecutive full batches (which it stops computing then): the dense gradient
// of this batch and of its previous one (the parameters moved in between, by this worker's push and the
// others': a biased estimate, as a lone replica's), on 1 pair of batches in [train] noise_scale_every (a
// short batch where one was due delays the pair by one), each pair standing for that many in the
// moving averages.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "grad_norms.hpp"
#include "noise_scale.hpp"
#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

namespace {

class async_ps final : public strategy {
 public:
  explicit async_ps(const job::job_spec& spec)
      : estimate_(spec.nn.train.noise_scale),
        batch_size_(spec.nn.train.batch_size),
        schedule_(spec.nn.train.noise_scale_every),
        ns_(static_cast<double>(std::max<std::uint32_t>(1, spec.job.workers)) * spec.nn.train.batch_size) {}
  std::string_view name() const override { return "async_ps"; }
  bool steps_outlive_worker() const override { return true; }  // the shards hold its settled pushes
  bool steps_on_shards() const override { return true; }
  wire::goodput_report goodput() const override {
    wire::goodput_report g;
    if (!estimate_ || !(ns_.ready() || (pushed_ && pushed_->rounds > 0))) return g;
    g.valid = true;
    g.base_batch = static_cast<std::uint32_t>(ns_.base_batch());
    if (pushed_ && pushed_->rounds > 0) {  // the shards': floored as noise_scale floors its own
      g.grad_sqr = goodput::noise_scale::floor_sqr(pushed_->grad_sqr);
      g.grad_var = goodput::noise_scale::floor_var(pushed_->grad_var);
      g.noise_scale = std::isnan(pushed_->grad_sqr) || std::isnan(pushed_->grad_var)
                          ? std::numeric_limits<double>::quiet_NaN()  // diverged: not "infinite"
                      : g.grad_sqr > 0 ? g.grad_var * ns_.base_batch() / g.grad_sqr
                                       : std::numeric_limits<double>::infinity();
      g.rounds = pushed_->rounds;
      g.push_shards = pushed_->shards;
    } else {
      g.grad_sqr = ns_.sqr();
      g.grad_var = ns_.var();
      g.noise_scale = ns_.noise_scale_samples();
      g.rounds = ns_.rounds();
    }
    g.lr_scaling = "none";
    g.batch = g.local_batch = static_cast<std::uint32_t>(batch_size_);
    return g;
  }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    if (!b) return {exhausted ? step_result::kind::finished : step_result::kind::idle};
    auto& be = ctx.backend;
    if (auto p = ctx.ps.pull(be, *b); !p) {
      // Before any pull succeeded the shards may still be joining (every job's start): said once.
      if (!pulled_) return waiting(p.err());
      return retry("pull", p.err());
    }
    pulled_ = true;
    // The next batch's rows come while this one trains; they miss this batch's push (sent after).
    if (ctx.next) ctx.ps.prefetch(be, *ctx.next);
    if (auto u = be.from_host(host_copy::parameters); !u) throw std::runtime_error(u.err().to_string());
    auto loss = be.compute_gradients(*b);
    if (!loss) throw std::runtime_error(loss.err().to_string());
    if (auto d = be.to_host(host_copy::gradients); !d) throw std::runtime_error(d.err().to_string());
    if (estimate_ && !pushed_) observe(be, b->size());  // its own, until the shards' estimate comes
    if (auto q = ctx.ps.push(be, b->size()); !q) return retry("push", q.err());
    if (estimate_)
      if (auto n = ctx.ps.noise_from_pushes()) pushed_ = *n;
    return {step_result::kind::trained, b->size(), *loss};
  }

  expected<void> prepare_eval(worker_context& ctx, const nn::batch& b) override {
    return ctx.ps.pull(ctx.backend, b);
  }

 private:
  // This batch and the previous one, both full: a biased pair (noise_scale.hpp), on the batches
  // goodput::pair_schedule says (1 pair in [train] noise_scale_every; a short batch where one was due
  // delays it by one).
  void observe(trainer_backend& be, std::size_t n) {
    auto g = be.gradients();
    const auto t = schedule_.begin(n == batch_size_ && !g.empty() ? n : 0);
    if (!(t.pair || t.keep)) return;
    const double sqr = goodput::sqr_norm(g, {});
    prev_.resize(g.size());
    if (t.pair) {
      const double big = goodput::pair_sqr_and_keep(g, prev_, {});
      ns_.add({0.5 * (sqr + prev_sqr_), big, static_cast<double>(n), 2.0 * static_cast<double>(n),
               static_cast<double>(schedule_.every())},
              true);
    } else {
      std::copy(g.begin(), g.end(), prev_.begin());
    }
    prev_sqr_ = sqr;
    schedule_.end(t.pair, t.keep);
  }
  step_result waiting(const error& e) {
    if (!said_waiting_) spdlog::info("async_ps: waiting for the PS shards ({})", e.context());
    said_waiting_ = true;
    return {step_result::kind::retry};
  }
  static step_result retry(const char* what, const error& e) {
    spdlog::warn("async_ps: {} failed, retrying the batch: {}", what, e.to_string());
    return {step_result::kind::retry};
  }

  bool estimate_;
  bool pulled_ = false, said_waiting_ = false;  // a pull succeeded; the start-up wait was logged
  std::size_t batch_size_;
  goodput::pair_schedule schedule_;  // which batches keep and pair
  goodput::noise_scale ns_;
  std::optional<pushed_noise> pushed_;  // the shards' estimate, summed, from the latest push replies
  std::vector<float> prev_;             // the kept batch's gradient
  double prev_sqr_ = 0;
};

}  // namespace

void register_async_ps_strategy() {
  static strategy_registrar reg("async_ps",
                                [](const job::job_spec& spec) { return std::make_unique<async_ps>(spec); });
}

}  // namespace troupe::actors
