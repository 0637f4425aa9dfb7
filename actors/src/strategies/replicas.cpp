#include "replicas.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>

namespace troupe::actors::replicas {

namespace {
// Slots are created on a parameter's first update; replicas must agree on their size first.
void size_slots(worker_context& ctx) {
  const auto& opt = ctx.trainer.get_optimizer();
  const auto& params = ctx.trainer.trainable_parameters();
  auto& state = ctx.trainer.dense_state();
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::size_t want = opt.slots_per_element() * params[i]->value.size();
    if (state[i].values.size() != want) state[i].values.assign(want, opt.slot_init());
  }
}

// Visits (pointer, count) spans of the state; step counters travel as one float each (exact up
// to 2^24 steps), through a scratch value written back by `store`.
template <class Visit, class Store>
void walk(worker_context& ctx, bool with_optimizer, Visit&& v, Store&& store) {
  for (auto* p : ctx.model.parameters()) v(p->value.data(), p->value.size());
  if (!with_optimizer) return;
  size_slots(ctx);
  for (auto& s : ctx.trainer.dense_state()) {
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

namespace {
// The rank whose replica has taken the most optimizer steps (the lowest on ties). Not simply rank
// 0: ranks follow node names, so a fresh replacement of worker-0 would be rank 0 and its initial
// weights would overwrite the trained replicas.
expected<int> most_trained_rank(worker_context& ctx) {
  auto info = ctx.ring.ensure();
  if (!info) return info.err();
  std::uint64_t mine = 0;
  for (const auto& s : ctx.trainer.dense_state()) mine = std::max(mine, s.step);
  std::vector<float> steps(static_cast<std::size_t>(info->size), 0.0f);
  steps[static_cast<std::size_t>(info->rank)] = static_cast<float>(mine);
  if (auto r = ctx.ring.allreduce(steps); !r) return r.err();
  return static_cast<int>(std::max_element(steps.begin(), steps.end()) - steps.begin());
}
}  // namespace

void reserve_state(worker_context& ctx, bool with_optimizer, std::vector<float>& buf) {
  if (with_optimizer) size_slots(ctx);
  buf.assign(ctx.trainer.dense_state().size(), 0.0f);
}

expected<void> sync_from_rank0(worker_context& ctx, bool with_optimizer, std::vector<float>& buf) {
  auto started = std::chrono::steady_clock::now();
  if (auto alone = ctx.ring.ensure(); alone && alone->size <= 1) return {};
  auto src = most_trained_rank(ctx);
  if (!src) return src.err();
  auto agreed = std::chrono::steady_clock::now();
  auto info = ctx.ring.ensure();
  if (!info) return info.err();
  bool source = info->rank == *src;
  // Span by span, straight from the source's replica into the others' (no packing: the source
  // writes its state into the ring and goes on to its next step while the others read it, when the
  // ring's capacity holds it: [job] ring_capacity_kb). The optimizer's step counters go last: a
  // replica whose copy is interrupted keeps its old counters and is never taken as the most trained.
  expected<void> ok;
  std::size_t floats = 0;
  auto copy = [&](float* p, std::size_t k) {
    if (ok) ok = ctx.ring.broadcast(std::span<float>(p, k), *src);
    floats += k;
  };
  for (auto* p : ctx.model.parameters()) copy(p->value.data(), p->value.size());
  if (with_optimizer) {
    size_slots(ctx);
    auto& slots = ctx.trainer.dense_state();
    for (auto& s : slots) copy(s.values.data(), s.values.size());
    // Step counters travel as floats (exact up to 2^24 steps).
    buf.resize(slots.size());
    for (std::size_t i = 0; i < slots.size(); ++i) buf[i] = static_cast<float>(slots[i].step);
    copy(buf.data(), buf.size());
    if (ok && !source)
      for (std::size_t i = 0; i < slots.size(); ++i) set_step(slots[i], buf[i]);
  }
  if (!ok) return ok;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  spdlog::info(
      "ring epoch {} (rank {} of {}): replicas synchronised from rank {} ({} floats) in {:.2f} ms "
      "({:.2f} ms agreeing on the source, {:.2f} ms copying)",
      info->epoch, info->rank, info->size, *src, floats, ms(started, std::chrono::steady_clock::now()),
      ms(started, agreed), ms(agreed, std::chrono::steady_clock::now()));
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
