// Asynchronous SGD on parameter servers (ElasticDL's default): pull the parameters a minibatch
// needs, compute gradients, push them; the shards apply the optimizer. Workers never wait for each
// other, so one dying costs nothing but its task.
#include <spdlog/spdlog.h>

#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

namespace {

class async_ps final : public strategy {
 public:
  std::string_view name() const override { return "async_ps"; }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    if (!b) return {exhausted ? step_result::kind::finished : step_result::kind::idle};
    auto& be = ctx.backend;
    if (auto p = ctx.ps.pull(be, *b); !p) return retry("pull", p.err());
    // The next batch's rows come while this one trains; they miss this batch's push (sent after).
    if (ctx.next) ctx.ps.prefetch(be, *ctx.next);
    if (auto u = be.from_host(host_copy::parameters); !u) throw std::runtime_error(u.err().to_string());
    auto loss = be.compute_gradients(*b);
    if (!loss) throw std::runtime_error(loss.err().to_string());
    if (auto d = be.to_host(host_copy::gradients); !d) throw std::runtime_error(d.err().to_string());
    if (auto q = ctx.ps.push(be); !q) return retry("push", q.err());
    return {step_result::kind::trained, b->size(), *loss};
  }

  expected<void> prepare_eval(worker_context& ctx, const nn::batch& b) override {
    return ctx.ps.pull(ctx.backend, b);
  }

 private:
  static step_result retry(const char* what, const error& e) {
    spdlog::warn("async_ps: {} failed, retrying the batch: {}", what, e.to_string());
    return {step_result::kind::retry};
  }
};

}  // namespace

void register_async_ps_strategy() {
  static strategy_registrar reg("async_ps",
                                [](const job::job_spec&) { return std::make_unique<async_ps>(); });
}

}  // namespace troupe::actors
