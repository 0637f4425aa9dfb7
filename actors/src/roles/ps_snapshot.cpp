#include "ps_snapshot.hpp"

#include <cstring>

namespace troupe::actors {

void put_step(std::vector<float>& v, std::uint64_t step) {
  float f[2];
  std::memcpy(f, &step, sizeof step);
  v.push_back(f[0]);
  v.push_back(f[1]);
}

std::uint64_t get_step(const float* f) {
  std::uint64_t s;
  std::memcpy(&s, f, sizeof s);
  return s;
}

ps_snapshot::ps_snapshot(const std::map<std::string, owned_dense>& dense,
                         std::map<std::string, owned_table>& tables, bool full)
    : full_(full) {
  for (const auto& [name, d] : dense) {
    out_.dense.emplace_back(name, std::vector<float>(d.param->value.begin(), d.param->value.end()));
    auto& slots = out_.dense_slots.emplace_back(name, d.slots.values).second;
    put_step(slots, d.slots.step);
  }
  for (auto& [name, t] : tables) {
    table_copy& c = tables_.emplace_back();
    c.t = &t;
    c.frozen = static_cast<std::uint32_t>(t.slots.size());
    c.copied.assign((c.frozen + 63) / 64, 0);
    if (full) {
      c.count = c.frozen;
    } else {
      std::swap(c.taken, t.dirty);  // pushes from now on go to the next checkpoint
      c.count = c.taken.size();
    }
    // Reserved, not filled: the pages are touched as rows are copied, slice by slice.
    c.rows.name = c.slots.name = name;
    c.rows.width = t.table->dim();
    c.slots.width = t.slots.width() + 2;
    c.rows.ids.reserve(c.count);
    c.slots.ids.reserve(c.count);
    c.rows.values.reserve(c.count * c.rows.width);
    c.slots.values.reserve(c.count * c.slots.width);
  }
}

void ps_snapshot::table_copy::copy(std::uint32_t s) {
  copied[s >> 6] |= std::uint64_t{1} << (s & 63);
  const std::uint64_t id = t->slots.id(s);
  rows.ids.push_back(id);
  slots.ids.push_back(id);
  // A row with optimizer state exists (a push made both); were it missing, row() would create it
  // with its initial value, which is what it is.
  const float* r = t->table->row(id);
  rows.values.insert(rows.values.end(), r, r + rows.width);
  std::uint64_t* step = nullptr;
  const float* sl = t->slots.get(id, &step);  // exists: creates nothing
  slots.values.insert(slots.values.end(), sl, sl + (slots.width - 2));
  put_step(slots.values, *step);
}

bool ps_snapshot::copy_some(std::chrono::nanoseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  constexpr std::size_t kBetweenChecks = 64;
  while (next_table_ < tables_.size()) {
    table_copy& c = tables_[next_table_];
    const std::size_t walk = full_ ? c.frozen : c.taken.size();
    while (c.cursor < walk) {
      const std::size_t end = std::min(walk, c.cursor + kBetweenChecks);
      for (; c.cursor < end; ++c.cursor) {
        const std::uint32_t s = full_ ? static_cast<std::uint32_t>(c.cursor) : c.taken.slots()[c.cursor];
        if (c.is_pending(s, full_)) c.copy(s);
      }
      if (c.cursor < walk && std::chrono::steady_clock::now() >= until) return false;
    }
    ++next_table_;
  }
  return true;
}

bool ps_snapshot::done() const {
  return next_table_ >= tables_.size();
}

void ps_snapshot::before_update(owned_table& t, std::span<const std::uint64_t> ids) {
  for (std::size_t k = next_table_; k < tables_.size(); ++k) {
    table_copy& c = tables_[k];
    if (c.t != &t) continue;
    if (c.rows.ids.size() == c.count) return;  // all copied
    for (auto id : ids) {
      std::uint64_t* step = nullptr;
      std::uint32_t s = 0;
      (void)t.slots.get(id, &step, &s);  // a new id's state: created now instead of in the push
      if (c.is_pending(s, full_)) c.copy(s);
    }
    return;
  }
}

std::uint64_t ps_snapshot::rows() const {
  std::uint64_t n = 0;
  for (const auto& c : tables_) n += c.rows.ids.size();
  return n;
}

std::uint64_t ps_snapshot::bytes() const {
  std::uint64_t n = 0;
  for (const auto& d : out_.dense) n += 4 * d.second.size();
  for (const auto& d : out_.dense_slots) n += 4 * d.second.size();
  for (const auto& c : tables_) n += 4 * (c.rows.values.size() + c.slots.values.size());
  return n;
}

storage::flat_state ps_snapshot::take() {
  for (auto& c : tables_) {
    out_.embeddings.push_back(std::move(c.rows));
    out_.embedding_slots.push_back(std::move(c.slots));
  }
  tables_.clear();
  return std::move(out_);
}

}  // namespace troupe::actors
