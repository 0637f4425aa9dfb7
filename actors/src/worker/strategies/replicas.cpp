#include "replicas.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>

namespace troupe::actors::replicas {

namespace {
// Visits (pointer, count) spans of the state; step counters travel as one float each (exact up
// to 2^24 steps), through a scratch value written back by `store`.
template <class Visit, class Store>
void walk(worker_context& ctx, bool with_optimizer, Visit&& v, Store&& store) {
  auto& be = ctx.backend;
  v(be.parameters().data(), be.parameters().size());
  for (auto b : be.buffers()) v(b.data(), b.size());
  if (!with_optimizer) return;
  be.reserve_optimizer_state();
  for (auto& s : be.optimizer_state()) {
    v(s.values.data(), s.values.size());
    float step = static_cast<float>(s.step);
    v(&step, 1);
    store(s, step);
  }
}
void keep(nn::dense_slots&, float) {}
void set_step(nn::dense_slots& s, float step) {
  s.step = static_cast<std::uint64_t>(step);
}
}  // namespace

std::size_t state_size(worker_context& ctx, bool with_optimizer) {
  std::size_t n = 0;
  walk(
      ctx, with_optimizer, [&](float*, std::size_t k) { n += k; }, keep);
  return n;
}

void pack_state(worker_context& ctx, bool with_optimizer, std::span<float> out) {
  std::size_t at = 0;
  walk(
      ctx, with_optimizer,
      [&](float* p, std::size_t k) {
        std::memcpy(out.data() + at, p, k * sizeof(float));
        at += k;
      },
      keep);
}

void unpack_state(worker_context& ctx, bool with_optimizer, std::span<const float> in) {
  std::size_t at = 0;
  walk(
      ctx, with_optimizer,
      [&](float* p, std::size_t k) {
        std::memcpy(p, in.data() + at, k * sizeof(float));
        at += k;
      },
      set_step);
}

double step_share(double samples, double ranks, std::size_t batch_size) {
  const double full = ranks * static_cast<double>(batch_size);
  return full > 0 ? std::min(1.0, samples / full) : 1.0;
}

double round_vote::lr_scale(std::size_t batch_size) const {
  return step_share(samples, ranks, batch_size);
}

void pack_count(std::uint64_t n, std::span<float> f) {
  f[0] = static_cast<float>(n & 0xffffff);
  f[1] = static_cast<float>(n >> 24);
}

std::uint64_t unpack_count(std::span<const float> f) {
  if (!(f[0] >= 0 && f[1] >= 0)) return 0;
  return static_cast<std::uint64_t>(f[0]) | static_cast<std::uint64_t>(f[1]) << 24;
}

round_vote::round_vote(std::span<const float> at) : samples(at[0]), exhausted(at[1]), ranks(at[2]) {}

void round_vote::cast(std::span<float> at, float samples, bool exhausted) {
  at[0] = samples;
  at[1] = exhausted ? 1.0f : 0.0f;
  at[2] = 1.0f;
}

step_result::kind round_vote::empty_round() const {
  return all_exhausted() ? step_result::kind::finished : step_result::kind::idle;
}

std::uint64_t optimizer_steps(trainer_backend& b) {
  std::uint64_t steps = 0;
  for (const auto& s : b.optimizer_state()) steps = std::max(steps, s.step);
  return steps;
}

expected<most_trained> vote_most_trained(worker_context& ctx, const ring_session::info& ring,
                                         std::uint64_t my_steps) {
  std::vector<float> steps(static_cast<std::size_t>(ring.size), 0.0f);
  steps[static_cast<std::size_t>(ring.rank)] = static_cast<float>(my_steps);
  if (auto r = ctx.ring.allreduce(steps); !r) return r.err();
  auto top = std::max_element(steps.begin(), steps.end());
  return most_trained{static_cast<int>(top - steps.begin()), static_cast<std::uint64_t>(*top)};
}

expected<void> broadcast_parameters(worker_context& ctx, int src, std::size_t& floats) {
  std::vector<std::span<float>> spans{ctx.backend.parameters()};
  for (auto b : ctx.backend.buffers()) spans.push_back(b);
  for (auto s : spans) {
    if (s.empty()) continue;
    if (auto r = ctx.ring.broadcast(s, src); !r) return r;
    floats += s.size();
  }
  return {};
}

void reserve_state(worker_context& ctx, bool with_optimizer, std::vector<float>& buf) {
  if (with_optimizer) ctx.backend.reserve_optimizer_state();
  buf.assign(ctx.backend.optimizer_state().size(), 0.0f);
}

namespace {
// The host trainer's optimizer slots, then its step counters (as floats, exact up to 2^24 steps)
// last: a replica whose copy is interrupted keeps its old counters and is never taken as the most
// trained.
expected<void> broadcast_optimizer(worker_context& ctx, int src, bool source, std::vector<float>& buf,
                                   std::size_t& floats) {
  ctx.backend.reserve_optimizer_state();
  auto& slots = ctx.backend.optimizer_state();
  for (auto& s : slots) {
    if (auto r = ctx.ring.broadcast(std::span<float>(s.values.data(), s.values.size()), src); !r) return r;
    floats += s.values.size();
  }
  buf.resize(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) buf[i] = static_cast<float>(slots[i].step);
  if (auto r = ctx.ring.broadcast(std::span<float>(buf.data(), buf.size()), src); !r) return r;
  floats += buf.size();
  if (!source)
    for (std::size_t i = 0; i < slots.size(); ++i) set_step(slots[i], buf[i]);
  return {};
}
}  // namespace

std::uint64_t restore_if_untrained(worker_context& ctx, std::uint64_t steps, std::span<float> extra) {
  if (steps > 0 || !ctx.store) return steps;
  std::vector<float> kept;
  auto r = ctx.store->restore_latest(ctx.backend, &kept);
  if (!r) {
    spdlog::error("{}: the ring's latest checkpoint could not be restored, starting from initial weights: {}",
                  ctx.self.to_string(), r.err().to_string());
    return 0;
  }
  if (!*r) return 0;
  const bool fits = !extra.empty() && kept.size() == extra.size() &&
                    std::all_of(kept.begin(), kept.end(), [](float f) { return std::isfinite(f); });
  if (fits) std::copy(kept.begin(), kept.end(), extra.begin());
  if (!kept.empty() && !fits)
    spdlog::warn(
        "{}: the strategy's state in the ring's checkpoint ({} floats) is not this strategy's ({}); "
        "it starts over",
        ctx.self.to_string(), kept.size(), extra.size());
  spdlog::info("{}: no replica had trained: the replica starts from the ring's latest checkpoint{}",
               ctx.self.to_string(),
               fits ? " with the strategy's state (" + std::to_string(kept.size()) + " floats)" : "");
  return **r;
}

void restarted(worker_context& ctx, std::uint64_t step) {
  if (ctx.replicas_restarted && ctx.replicas_restarted(step)) ctx.offered_batch_stale = true;
}

troupe::clock& clock_of(worker_context& ctx) {
  return ctx.clock ? *ctx.clock : troupe::clock::system();
}

double seconds_now(worker_context& ctx) {
  return std::chrono::duration<double>(clock_of(ctx).now().time_since_epoch()).count();
}

namespace {
// When a resync started, agreed on its source, and was copied.
void log_sync(const ring_session::info& ring, int src, std::size_t floats,
              std::array<troupe::clock::time_point, 3> at) {
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  spdlog::info(
      "ring epoch {} (rank {} of {}): replicas synchronised from rank {} ({} floats) in {:.2f} ms "
      "({:.2f} ms agreeing on the source, {:.2f} ms copying)",
      ring.epoch, ring.rank, ring.size, src, floats, ms(at[0], at[2]), ms(at[0], at[1]), ms(at[1], at[2]));
}
}  // namespace

expected<void> sync_from_most_trained(worker_context& ctx, const ring_session::info& ring,
                                      bool with_optimizer, std::vector<float>& buf, std::span<float> extra) {
  troupe::clock& clk = clock_of(ctx);
  auto started = clk.now();
  const std::uint64_t mine = optimizer_steps(ctx.backend);
  if (ring.size <= 1) {
    restore_if_untrained(ctx, mine, extra);
    if (mine == 0) restarted(ctx, optimizer_steps(ctx.backend));
    return {};
  }
  auto src = vote_most_trained(ctx, ring, mine);
  if (!src) return src.err();
  const bool source = ring.rank == src->rank;
  if (source) restore_if_untrained(ctx, src->steps, extra);
  // Overwritten from here on, even should the copy fail partway: its rows not yet in every replica
  // are lost (worker_context::replica_overwritten).
  if (!source && ctx.replica_overwritten && ctx.replica_overwritten()) ctx.offered_batch_stale = true;
  auto agreed = clk.now();
  // Straight from the source's replica into the others' (no packing); a device backend's through
  // its host mirror.
  if (source)
    if (auto h = ctx.backend.to_host(host_copy::parameters); !h) return h;
  std::size_t floats = 0;
  if (auto r = broadcast_parameters(ctx, src->rank, floats); !r) return r;
  if (with_optimizer)
    if (auto r = broadcast_optimizer(ctx, src->rank, source, buf, floats); !r) return r;
  if (!extra.empty()) {
    if (auto r = ctx.ring.broadcast(extra, src->rank); !r) return r;
    floats += extra.size();
  }
  if (!source)
    if (auto h = ctx.backend.from_host(host_copy::parameters); !h) return h;
  // Every rank has the source's steps now.
  if (src->steps == 0 && with_optimizer) restarted(ctx, optimizer_steps(ctx.backend));
  log_sync(ring, src->rank, floats, {started, agreed, clk.now()});
  return {};
}

step_result drop_round(worker_context& ctx, const error& e, const char* what) {
  spdlog::info("{} dropped ({}); rebuilding the ring", what, e.to_string());
  ctx.ring.reset();
  step_result r{step_result::kind::retry};
  r.dropped = true;
  return r;
}

}  // namespace troupe::actors::replicas
