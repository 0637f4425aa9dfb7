// Local SGD (periodic model averaging), the worked example of adding a strategy (see
// docs/strategies.md): each worker trains its own replica with its own optimizer for `sync_every`
// steps, then the ring averages the replicas' parameters, weighted by the samples each trained in
// that round. Workers without data take part with zero weight.
// A replica's rows since the last round are its own until the next one averages them into every
// replica (strategy::rows_settle_in_rounds): each round it counts (worker_context::rounds_settled)
// lets the worker report the tasks it finished before it, and a resync that overwrites this
// replica loses them (the worker gives those tasks back; the batch offered is not trained).
// The ring numbers its rounds (1: the initial weights; every rank counts each round, a resync hands
// its number to every rank, and a ring checkpoint keeps it as its step and its durable state): a
// task's report names the round that averaged its rows (checkpointed_step), so a ring restarted from
// a checkpoint of an earlier round trains it again.
// A new ring (a worker lost or joined) first resyncs its replicas (resync): the ranks whose replicas
// come from the latest round (the same round number, reached in the same ring) are averaged as in a
// round, and the result goes to every replica; only the others (a joiner, a rank a broken round left
// behind) lose their rows since their own last round. Until 2026-12-07 the most trained replica was
// copied over the others, and every survivor but one lost its rows since the last round.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <span>
#include <string>
#include <utility>

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
      const auto settled = ctx.rounds_settled;
      if (auto s = resync(ctx, *ring); !s) return replicas::drop_round(ctx, s.err(), "local_sgd: resync");
      since_sync_ = 0;
      round_samples_ = 0;
      // This replica was overwritten: the batch offered was cut after rows it lost (the worker
      // moved its task back), and is not trained; the worker offers the right one at once. Or its
      // rows were averaged: the worker marks what its task trained so far as settled after this step,
      // so the batch, not in the average, is offered again too.
      if (ctx.rounds_settled != settled) ctx.offered_batch_stale = true;
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
    if (auto h = ctx.backend.to_host(host_copy::parameters); !h)
      return replicas::drop_round(ctx, h.err(), "local_sgd: averaging round");
    const float w = static_cast<float>(round_samples_);
    const std::size_t n = pack_weighted(ctx, w, replicas::round_vote::floats);
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
    unpack_average(ctx, total, n);
    if (auto h = ctx.backend.from_host(host_copy::parameters); !h)
      throw std::runtime_error(h.err().to_string());
    return out;
  }

  // The replica's parameters (and buffers) times `w` into the first floats of buf_, with `extra`
  // floats after them for the caller's own; how many floats the state took. The replica must be on
  // the host (backend.to_host).
  std::size_t pack_weighted(worker_context& ctx, float w, std::size_t extra) {
    const std::size_t n = replicas::state_size(ctx, false);
    buf_.resize(n + extra);
    replicas::pack_state(ctx, false, std::span(buf_.data(), n));
    for (std::size_t i = 0; i < n; ++i) buf_[i] *= w;
    return n;
  }
  // The ring's weighted sum in buf_'s first `n` floats, over the summed weight, into the replica (on
  // the host: the caller's backend.from_host follows).
  void unpack_average(worker_context& ctx, float total, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) buf_[i] /= total;
    replicas::unpack_state(ctx, false, std::span<const float>(buf_.data(), n));
  }

  // Each rank's word before a resync (vote_floats floats each, summed by an allreduce): its round
  // and the ring epoch of its last resync (two floats each), its samples since that round, and
  // whether its replica holds any training (trained, or resynced: an untrained joiner holds none).
  struct rank_vote {
    std::uint64_t round = 0, base = 0;
    float samples = 0;
    bool holds = false;
  };
  static constexpr std::size_t vote_floats = 6;
  // The ranks of the latest round (its number and base both the most of those holding training).
  struct group {
    std::uint64_t round = 0, base = 0;
    std::vector<int> ranks;
    float samples = 0;
  };

  expected<void> resync(worker_context& ctx, const ring_session::info& ring) {
    if (ring.size > 1) {
      auto votes = vote(ctx, ring);
      if (!votes) return votes.err();
      if (auto g = latest_group(*votes); !g.ranks.empty()) return average_group(ctx, ring, g);
    }
    // No replica holds any training (a fresh job's first ring, a resumed one's): rank 0's, restored
    // from the ring's checkpoint with its round number, goes to every rank.
    std::array<float, 2> round{};
    replicas::pack_count(rounds_, round);
    if (auto s = replicas::sync_from_most_trained(ctx, ring, false, buf_, round); !s) return s;
    rounds_ = std::max<std::uint64_t>(1, replicas::unpack_count(round));
    base_ = ring.epoch;
    return {};
  }

  expected<std::vector<rank_vote>> vote(worker_context& ctx, const ring_session::info& ring) {
    std::vector<float> v(static_cast<std::size_t>(ring.size) * vote_floats, 0.0f);
    auto mine = std::span(v).subspan(static_cast<std::size_t>(ring.rank) * vote_floats, vote_floats);
    replicas::pack_count(rounds_, mine.subspan(0, 2));
    replicas::pack_count(base_, mine.subspan(2, 2));
    mine[4] = static_cast<float>(round_samples_);
    mine[5] = base_ != 0 || replicas::optimizer_steps(ctx.backend) > 0 ? 1.0f : 0.0f;
    if (auto r = ctx.ring.allreduce(v); !r) return r.err();
    std::vector<rank_vote> out(static_cast<std::size_t>(ring.size));
    for (std::size_t i = 0; i < out.size(); ++i) {
      auto at = std::span<const float>(v).subspan(i * vote_floats, vote_floats);
      out[i] = {replicas::unpack_count(at.subspan(0, 2)), replicas::unpack_count(at.subspan(2, 2)), at[4],
                at[5] > 0.5f};
    }
    return out;
  }

  static group latest_group(const std::vector<rank_vote>& votes) {
    group g;
    for (const auto& v : votes)
      if (v.holds && std::pair(v.round, v.base) > std::pair(g.round, g.base))
        g.round = v.round, g.base = v.base;
    for (std::size_t i = 0; i < votes.size(); ++i)
      if (votes[i].holds && votes[i].round == g.round && votes[i].base == g.base) {
        g.ranks.push_back(static_cast<int>(i));
        g.samples += votes[i].samples;
      }
    if (g.base != 0 || g.ranks.size() <= 1) return g;
    // Replicas that trained before any resync share no known start (a model's initial weights need
    // not be the same on every worker): the most trained one alone, as a copy.
    const int top = *std::max_element(g.ranks.begin(), g.ranks.end(), [&](int a, int b) {
      return votes[static_cast<std::size_t>(a)].samples < votes[static_cast<std::size_t>(b)].samples;
    });
    g.ranks = {top};
    g.samples = votes[static_cast<std::size_t>(top)].samples;
    return g;
  }

  // The group's replicas averaged (weighted by their samples since the round; equally when none
  // trained since) into every replica: a round for the group's ranks, whose rows settle. One alone
  // is copied as it is. The others are told their replica is overwritten, before the collective.
  expected<void> average_group(worker_context& ctx, const ring_session::info& ring, const group& g) {
    const auto started = replicas::clock_of(ctx).now();
    const bool member = std::find(g.ranks.begin(), g.ranks.end(), ring.rank) != g.ranks.end();
    if (!member && ctx.replica_overwritten && ctx.replica_overwritten()) ctx.offered_batch_stale = true;
    if (auto h = ctx.backend.to_host(host_copy::parameters); !h) return h;
    std::size_t floats = 0;
    if (g.ranks.size() == 1) {
      if (auto r = replicas::broadcast_parameters(ctx, g.ranks[0], floats); !r) return r;
    } else {
      floats = pack_weighted(ctx,
                             !member         ? 0.0f
                             : g.samples > 0 ? static_cast<float>(round_samples_)
                                             : 1.0f,
                             0);
      if (auto r = ctx.ring.allreduce(buf_); !r) return r;
      unpack_average(ctx, g.samples > 0 ? g.samples : static_cast<float>(g.ranks.size()), floats);
    }
    if (auto h = ctx.backend.from_host(host_copy::parameters); !h) return h;
    rounds_ = g.round + 1;
    base_ = ring.epoch;
    if (member) ++ctx.rounds_settled;
    log_group(ring, g, floats,
              std::chrono::duration<double, std::milli>(replicas::clock_of(ctx).now() - started));
    return {};
  }

  static void log_group(const ring_session::info& ring, const group& g, std::size_t floats,
                        std::chrono::duration<double, std::milli> took) {
    std::string ranks;
    for (int r : g.ranks) {
      if (!ranks.empty()) ranks += ',';
      ranks += std::to_string(r);
    }
    spdlog::info(
        "ring epoch {} (rank {} of {}): replicas {} from rank(s) {} of round {} "
        "({} samples since; {} floats) in {:.2f} ms",
        ring.epoch, ring.rank, ring.size, g.ranks.size() > 1 ? "averaged" : "synchronised", ranks, g.round,
        g.samples, floats, took.count());
  }

  std::uint32_t sync_every_;
  std::uint64_t rounds_ = 1;  // the ring's rounds: 1 for the initial weights
  std::uint64_t base_ = 0;    // the ring epoch of this replica's last resync (0: none yet)
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
