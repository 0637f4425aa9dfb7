#include "replicas.hpp"

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
void set_step(nn::dense_slots& s, float step) { s.step = static_cast<std::uint64_t>(step); }
}  // namespace

std::size_t state_size(worker_context& ctx, bool with_optimizer) {
  std::size_t n = 0;
  walk(ctx, with_optimizer, [&](float*, std::size_t k) { n += k; }, keep);
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

expected<void> sync_from_rank0(worker_context& ctx, bool with_optimizer, std::vector<float>& buf) {
  buf.resize(state_size(ctx, with_optimizer));
  pack_state(ctx, with_optimizer, buf);
  if (auto r = ctx.ring.broadcast(buf); !r) return r;
  unpack_state(ctx, with_optimizer, buf);
  return {};
}

}  // namespace troupe::actors::replicas
