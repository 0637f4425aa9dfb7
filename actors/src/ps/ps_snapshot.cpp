#include "ps_snapshot.hpp"

#include <cstring>

#include "troupe/core/clock.hpp"
#include "troupe/model/state.hpp"

namespace troupe::actors {

void put_step(std::vector<float>& v, std::uint64_t step) {
  model::append_step(v, step);
}

std::uint64_t get_step(const float* f) {
  return model::read_step(f);
}

namespace {

// `v` emptied with room for `room` elements; when it had to grow, every page of the new buffer is
// touched here (off the shard's actor), so the actor's copy does not fault it in. On a VM the
// first touch of a page can cost milliseconds (the host backs it then).
template <class T>
void make_room(std::vector<T>& v, std::size_t room) {
  v.clear();
  if (v.capacity() >= room) return;
  v = std::vector<T>();  // frees the old buffer here as well
  v.resize(room);
  v.clear();
}

}  // namespace

void snapshot_buffers::recycle() {
  retired.clear();
  for (auto& set : dirty) set.clear();
  for (auto* all : {&state.embeddings, &state.embedding_slots})
    for (auto& r : *all) {
      const std::size_t room = r.ids.size() + r.ids.size() / 4;  // the next snapshot may be larger
      make_room(r.ids, room);
      make_room(r.values, room * r.width);
    }
}

ps_snapshot::ps_snapshot(const std::map<std::string, owned_dense>& dense,
                         std::map<std::string, owned_table>& tables, bool full, snapshot_buffers reuse)
    : full_(full), out_(std::move(reuse.state)), retired_(std::move(reuse.retired)) {
  std::vector<storage::flat_rows> rows = std::move(out_.embeddings), slots = std::move(out_.embedding_slots);
  out_.embeddings.clear();
  out_.embedding_slots.clear();
  out_.dense.resize(dense.size());
  out_.dense_slots.resize(dense.size());
  std::size_t i = 0;
  for (const auto& [name, d] : dense) {
    out_.dense[i].first = out_.dense_slots[i].first = name;
    out_.dense[i].second.assign(d.param->value.begin(), d.param->value.end());
    auto& s = out_.dense_slots[i].second;
    s.assign(d.slots.values.begin(), d.slots.values.end());
    put_step(s, d.slots.step);
    ++i;
  }
  for (auto& [name, t] : tables) {
    const std::size_t k = tables_.size();
    table_copy& c = tables_.emplace_back();
    c.t = &t;
    c.frozen = static_cast<std::uint32_t>(t.slots.size());
    c.copied.assign((c.frozen + 63) / 64, 0);
    if (k < reuse.dirty.size()) c.taken = std::move(reuse.dirty[k]);  // emptied, kept for the next
    if (full) {
      c.count = c.frozen;
    } else {
      std::swap(c.taken, t.dirty);  // pushes from now on go to the next checkpoint (a recycled set)
      c.count = c.taken.size();
    }
    // Room, not contents: the pages are touched as rows are copied, slice by slice.
    if (k < rows.size()) c.rows = std::move(rows[k]);
    if (k < slots.size()) c.slots = std::move(slots[k]);
    prepare(c.rows, name, t.table->dim(), c.count);
    prepare(c.slots, name, t.slots.width() + 2, c.count);
  }
  for (auto* left : {&rows, &slots})
    for (std::size_t k = tables.size(); k < left->size(); ++k) retired_.push_back(std::move((*left)[k]));
}

void ps_snapshot::add_dense_slot(std::string name, std::vector<float> values) {
  out_.dense_slots.emplace_back(std::move(name), std::move(values));
}

void ps_snapshot::prepare(storage::flat_rows& r, const std::string& name, std::size_t width,
                          std::size_t count) {
  if (r.ids.capacity() < count || r.values.capacity() < count * width) {
    retired_.push_back(std::move(r));
    r = storage::flat_rows{};
    const std::size_t room = count + count / 4;
    r.ids.reserve(room);
    r.values.reserve(room * width);
  }
  r.name = name;
  r.width = width;
  r.ids.clear();
  r.values.clear();
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
  // The budget bounds the real time the shard's actor spends away from its requests (what
  // ps_checkpoint_clock's records measure), so it runs on the real clock, not a test's.
  troupe::clock& real = troupe::clock::system();
  const auto until = real.now() + budget;
  constexpr std::size_t kBetweenChecks = 8;  // rows: a slow spell ends the slice soon
  while (next_table_ < tables_.size()) {
    table_copy& c = tables_[next_table_];
    const std::size_t walk = full_ ? c.frozen : c.taken.size();
    while (c.cursor < walk) {
      const std::size_t end = std::min(walk, c.cursor + kBetweenChecks);
      for (; c.cursor < end; ++c.cursor) {
        const std::uint32_t s = full_ ? static_cast<std::uint32_t>(c.cursor) : c.taken.slots()[c.cursor];
        if (c.is_pending(s, full_)) c.copy(s);
      }
      if (c.cursor < walk && real.now() >= until) return false;
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

snapshot_buffers ps_snapshot::take() {
  snapshot_buffers b;
  for (auto& c : tables_) {
    out_.embeddings.push_back(std::move(c.rows));
    out_.embedding_slots.push_back(std::move(c.slots));
    b.dirty.push_back(std::move(c.taken));
  }
  tables_.clear();
  b.state = std::move(out_);
  b.retired = std::move(retired_);
  return b;
}

}  // namespace troupe::actors
