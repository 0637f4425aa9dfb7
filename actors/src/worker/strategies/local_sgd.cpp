// Local SGD (periodic model averaging), the worked example of adding a strategy (see
// docs/strategies.md): each worker trains its own replica with its own optimizer for `sync_every`
// steps, then the ring averages the replicas' parameters, weighted by the samples each trained in
// that round. Workers without data take part with zero weight; a new ring first copies the most
// trained replica's parameters to every replica (replicas::sync_from_most_trained).
// A replica's rows since the last round are its own until the next one averages them into every
// replica (strategy::rows_settle_in_rounds): each round it counts (worker_context::rounds_settled)
// lets the worker report the tasks it finished before it, and a resync that overwrites this
// replica loses them (the worker gives those tasks back; the batch offered is not trained).
// The ring numbers its rounds (1: the initial weights; every rank counts each round, a resync hands
// the source's number to every rank, and a ring checkpoint keeps it as its step and its durable
// state): a task's report names the round that averaged its rows (checkpointed_step), so a ring
// restarted from a checkpoint of an earlier round trains it again.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <span>

#include "replicas.hpp"
#include "troupe/actors/strategy.hpp"

namespace troupe::actors {

namespace {

class local_sgd final : public strategy {
 public:
  explicit local_sgd(std::uint32_t sync_every) : sync_every_(sync_every) {}
  std::string_view name() const override { return "local_sgd"; }
  bool rows_settle_in_rounds() const override { return true; }
  std::uint64_t checkpointed_step(worker_context&) const override { return rounds_; }
  std::vector<float> durable_state() const override {
    std::vector<float> f(2);
    replicas::pack_count(rounds_, f);
    return f;
  }

  step_result step(worker_context& ctx, const nn::batch* b, bool exhausted) override {
    auto ring = ctx.ring.ensure();
    if (!ring) return {step_result::kind::retry};
    if (ring->fresh) {
      // The source's round number (a checkpoint's, restored into an untrained ring) to every rank.
      std::array<float, 2> round{};
      replicas::pack_count(rounds_, round);
      if (auto s = replicas::sync_from_most_trained(ctx, *ring, false, buf_, round); !s)
        return replicas::drop_round(ctx, s.err(), "local_sgd: averaging round");
      rounds_ = std::max<std::uint64_t>(1, replicas::unpack_count(round));
      since_sync_ = 0;
      round_samples_ = 0;
      // This replica was overwritten: the batch offered was cut after rows it lost (the worker
      // moved its task back), and is not trained; the worker offers the right one at once.
      if (ctx.offered_batch_stale) return {step_result::kind::retry};
    }
    step_result out{step_result::kind::idle};
    if (b) {
      auto l = ctx.backend.step(*b);
      if (!l) throw std::runtime_error(l.err().to_string());
      round_samples_ += b->size();
      out = {step_result::kind::trained, b->size(), *l};
    }
    if (++since_sync_ < sync_every_) return out;
    return average(ctx, out, b, exhausted);
  }

 private:
  // The averaging round: sum of (weight * parameters) and of weights over the ring, every
  // sync_every steps. `out` is the local step's result (it stands when the round is lost).
  step_result average(worker_context& ctx, step_result out, const nn::batch* b, bool exhausted) {
    std::size_t n = replicas::state_size(ctx, false);
    buf_.resize(n + replicas::round_vote::floats);
    if (auto h = ctx.backend.to_host(host_copy::parameters); !h)
      return replicas::drop_round(ctx, h.err(), "local_sgd: averaging round");
    replicas::pack_state(ctx, false, std::span(buf_.data(), n));
    float w = static_cast<float>(round_samples_);
    for (std::size_t i = 0; i < n; ++i) buf_[i] *= w;
    replicas::round_vote::cast(std::span(buf_).subspan(n), w, exhausted && !b);
    if (auto r = ctx.ring.allreduce(buf_); !r) {
      // The local step stands (the batch was trained); only this round's averaging is lost.
      replicas::drop_round(ctx, r.err(), "local_sgd: averaging round");
      out.dropped = true;
      return out;
    }
    since_sync_ = 0;
    round_samples_ = 0;
    ++rounds_;
    ++ctx.rounds_settled;  // every rank's rows since the last round are in the sum
    const replicas::round_vote vote{std::span(buf_).subspan(n)};
    const float total = vote.samples;
    if (total == 0.0f) return vote.all_exhausted() ? step_result{step_result::kind::finished} : out;
    for (std::size_t i = 0; i < n; ++i) buf_[i] /= total;
    replicas::unpack_state(ctx, false, std::span<const float>(buf_.data(), n));
    if (auto h = ctx.backend.from_host(host_copy::parameters); !h)
      throw std::runtime_error(h.err().to_string());
    return out;
  }

  std::uint32_t sync_every_;
  std::uint64_t rounds_ = 1;  // the ring's rounds: 1 for the initial weights
  std::uint32_t since_sync_ = 0;
  std::size_t round_samples_ = 0;
  std::vector<float> buf_;
};

}  // namespace

void register_local_sgd_strategy() {
  static strategy_registrar reg("local_sgd", [](const job::job_spec& spec) {
    return std::make_unique<local_sgd>(spec.job.sync_every);
  });
}

}  // namespace troupe::actors
