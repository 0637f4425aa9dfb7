#include "replica_state.hpp"

#include <algorithm>

#include "troupe/model/state.hpp"
#include "troupe/nn/errc.hpp"
#include "troupe/storage/errc.hpp"

namespace troupe::actors {

namespace {

void add_buffers(trainer_backend& b, storage::flat_state& s) {
  auto bufs = b.buffers();
  auto names = b.buffer_names();
  for (std::size_t i = 0; i < bufs.size() && i < names.size(); ++i)
    s.dense.emplace_back(names[i], std::vector<float>(bufs[i].begin(), bufs[i].end()));
}

}  // namespace

expected<storage::flat_state> snapshot(trainer_backend& b) {
  if (auto h = b.to_host(host_copy::parameters); !h) return h.err();
  storage::flat_state s;
  const auto params = b.parameters();
  const auto& layout = b.layout();
  auto& state = b.optimizer_state();
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const auto& l = layout[i];
    s.dense.emplace_back(l.name,
                         std::vector<float>(params.begin() + static_cast<std::ptrdiff_t>(l.offset),
                                            params.begin() + static_cast<std::ptrdiff_t>(l.offset + l.size)));
    if (i < state.size() && !state[i].values.empty()) {
      std::vector<float> slots = state[i].values;
      model::append_step(slots, state[i].step);
      s.dense_slots.emplace_back(l.name, std::move(slots));
    }
  }
  add_buffers(b, s);
  return s;
}

expected<storage::flat_state> snapshot_buffers(trainer_backend& b) {
  if (auto h = b.to_host(host_copy::parameters); !h) return h.err();
  storage::flat_state s;
  add_buffers(b, s);
  return s;
}

namespace {

unexpected size_error(const std::string& name, std::size_t state, std::size_t model,
                      const std::string& shape) {
  return make_unexpected(nn::nn_errc::bad_shape, "tensor '" + name + "' has " + std::to_string(state) +
                                                     " values in the state; the model's is " + shape + " (" +
                                                     std::to_string(model) + " values)");
}

// "[n]" (built by append: GCC 12 warns -Wstringop-overflow on "[" + std::to_string(n)).
std::string flat_shape(std::size_t n) {
  return std::string(1, '[').append(std::to_string(n)).append(1, ']');
}

// The model's shape of trainable tensor i ("[784, 64]"), as far as the backend knows it.
std::string shape_of(trainer_backend& b, std::size_t i) {
  const auto& params = b.dense_parameters();
  if (i < params.size() && params[i]->value.size() == b.layout()[i].size)
    return params[i]->value.dims().to_string();
  return flat_shape(b.layout()[i].size);
}

// The buffers' part of restore_pass.
expected<void> restore_buffers(trainer_backend& b, const storage::shard_state& s, bool write,
                               restore_report& r) {
  auto bufs = b.buffers();
  auto names = b.buffer_names();
  for (std::size_t i = 0; i < bufs.size() && i < names.size(); ++i) {
    auto it = s.dense.find(names[i]);
    if (it == s.dense.end()) {
      r.missing.push_back(names[i]);
      continue;
    }
    if (it->second.size() != bufs[i].size())
      return size_error(names[i], it->second.size(), bufs[i].size(), flat_shape(bufs[i].size()));
    if (write) std::copy(it->second.begin(), it->second.end(), bufs[i].begin());
    ++r.buffers;
  }
  return {};
}

// One pass over the state's tensors: `write` false checks them all (no tensor of another size, none
// missing where `complete`), true writes them, after a pass that found nothing wrong: a state of
// another model leaves the replica as it was, not half restored.
expected<restore_report> restore_pass(trainer_backend& b, const storage::shard_state& s, bool optimizer,
                                      bool complete, bool write) {
  restore_report r;
  auto params = b.parameters();
  const auto& layout = b.layout();
  auto& state = b.optimizer_state();
  for (std::size_t i = 0; i < layout.size(); ++i) {
    const auto& l = layout[i];
    auto it = s.dense.find(l.name);
    if (it == s.dense.end()) {
      if (complete)
        return make_unexpected(storage::storage_errc::not_found, "the state has no tensor '" + l.name + "'");
      r.missing.push_back(l.name);
      continue;
    }
    if (it->second.size() != l.size) return size_error(l.name, it->second.size(), l.size, shape_of(b, i));
    if (write)
      std::copy(it->second.begin(), it->second.end(), params.begin() + static_cast<std::ptrdiff_t>(l.offset));
    ++r.tensors;
    auto sl = s.dense_slots.find(l.name);
    if (!optimizer || sl == s.dense_slots.end() || sl->second.size() < 2 || i >= state.size()) continue;
    if (write) {
      state[i].values.assign(sl->second.begin(), sl->second.end() - 2);
      state[i].step = model::read_step(sl->second.data() + sl->second.size() - 2);
    }
    ++r.slots;
  }
  if (auto ok = restore_buffers(b, s, write, r); !ok) return ok.err();
  return r;
}

}  // namespace

expected<restore_report> restore(trainer_backend& b, const storage::shard_state& s, bool optimizer,
                                 bool complete) {
  if (auto checked = restore_pass(b, s, optimizer, complete, false); !checked) return checked.err();
  auto r = restore_pass(b, s, optimizer, complete, true);
  if (!r) return r.err();
  if (auto h = b.from_host(host_copy::parameters); !h) return h.err();
  return r;
}

}  // namespace troupe::actors
