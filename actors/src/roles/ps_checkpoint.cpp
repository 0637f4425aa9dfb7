#include <cstring>

#include <spdlog/spdlog.h>

#include "../data_model.hpp"
#include "../ps_layout.hpp"
#include "../wire.hpp"
#include "ps_checkpoint_log.hpp"
#include "ps_state.hpp"
#include "troupe/storage/disk_fault.hpp"

namespace troupe::actors {

namespace {

// Step counters travel as two floats holding the u64's bits.
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

void fill_state(ps_state& st, storage::shard_state& s, bool full) {
  for (auto& [name, d] : st.dense) {
    s.dense[name].assign(d.param->value.begin(), d.param->value.end());
    auto& slots = s.dense_slots[name];
    slots = d.slots.values;
    put_step(slots, d.slots.step);
  }
  for (auto& [name, t] : st.tables) {
    auto& rows = s.embeddings[name];
    auto& slot_rows = s.embedding_slots[name];
    auto add = [&](std::uint64_t id) {
      auto& r = rows[id];
      r.resize(t.table->dim());
      t.table->read_rows({&id, 1}, r.data());
      std::vector<float> sl(t.slots.width());
      std::uint64_t step = 0;
      if (t.slots.read(id, sl.data(), step)) {
        put_step(sl, step);
        slot_rows[id] = std::move(sl);
      }
    };
    if (full)
      t.table->for_each([&](std::uint64_t id, const float*) { add(id); });
    else
      for (auto slot : t.dirty.slots()) add(t.slots.id(slot));
  }
}

void restore(ps_state& st, const storage::shard_state& s) {
  for (auto& [name, d] : st.dense) {
    auto v = s.dense.find(name);
    if (v != s.dense.end() && v->second.size() == d.param->value.size())
      std::copy(v->second.begin(), v->second.end(), d.param->value.begin());
    auto sl = s.dense_slots.find(name);
    if (sl != s.dense_slots.end() && sl->second.size() >= 2) {
      d.slots.values.assign(sl->second.begin(), sl->second.end() - 2);
      d.slots.step = get_step(sl->second.data() + sl->second.size() - 2);
    }
  }
  for (auto& [name, t] : st.tables) {
    auto rows = s.embeddings.find(name);
    if (rows != s.embeddings.end())
      for (const auto& [id, r] : rows->second)
        if (r.size() == t.table->dim()) t.table->write_rows({&id, 1}, r.data());
    auto slots = s.embedding_slots.find(name);
    if (slots != s.embedding_slots.end())
      for (const auto& [id, r] : slots->second)
        if (r.size() == t.slots.width() + 2)
          t.slots.write(id, r.data(), get_step(r.data() + t.slots.width()));
  }
}

}  // namespace

void init_shard(ps_state& st, node_context* rt, const data_paths& data) {
  st.rt = rt;
  st.index = static_cast<std::uint32_t>(rt->who().index);
  st.shards = rt->spec().ps.shards;
  st.timeline = std::make_shared<observe::job_timeline>(rt->who().job_dir);
  auto train = storage::record_store::open(data.train_dir);
  if (!train) throw std::runtime_error(train.err().to_string());
  auto m = build_model(rt->spec(), *train);
  if (!m) throw std::runtime_error(m.err().to_string());
  st.model = std::move(*m);
  auto opt = nn::make_optimizer(rt->spec().nn.train.optimizer);
  if (!opt) throw std::runtime_error(opt.err().to_string());
  st.opt = std::move(*opt);
  for (auto* p : st.model->parameters())
    if (p->trainable && shard_of_name(p->name, st.shards) == st.index) st.dense[p->name].param = p;
  for (auto* t : st.model->embedding_tables()) st.tables.emplace(t->name(), owned_table(t, *st.opt));
  const auto& dir = rt->spec().ps.checkpoint_dir;
  auto store = storage::checkpoint_store::open((dir.empty() ? rt->who().job_dir + "/checkpoints" : dir) +
                                               "/ps-" + std::to_string(st.index));
  if (!store) throw std::runtime_error(store.err().to_string());
  st.store.emplace(std::move(*store));
  auto latest = st.store->latest();
  if (!latest) throw std::runtime_error(latest.err().to_string());
  if (*latest) {
    auto s = st.store->load(**latest);
    if (!s) throw std::runtime_error(s.err().to_string());
    restore(st, *s);
    st.has_checkpoint = true;
    spdlog::info("ps-{}: restored checkpoint {}", st.index, **latest);
  }
  spdlog::info("ps-{}/{}: {} dense tensors, {} embedding tables", st.index, st.shards, st.dense.size(),
               st.tables.size());
}

namespace {
void report_fault(ps_state& st) {
  if (auto r = st.rt->send("master", "master", wire::disk_fault("checkpoint", st.fault), "ps"); !r)
    spdlog::debug("ps-{}: disk fault report: {}", st.index, r.err().to_string());
}
}  // namespace

void checkpoint(ps_state& st) {
  if (st.version == st.applied_at_checkpoint && st.has_checkpoint) return;
  bool full = !st.has_checkpoint || st.since_full + 1 >= st.rt->spec().ps.full_checkpoint_every;
  ps_checkpoint_record rec;
  rec.full = full;
  rec.begin_s = ps_checkpoint_clock();
  storage::shard_state s;
  fill_state(st, s, full);
  rec.snapshot_end_s = ps_checkpoint_clock();
  auto v = st.store->write(s, full ? storage::checkpoint_kind::full : storage::checkpoint_kind::incremental);
  rec.end_s = ps_checkpoint_clock();
  rec.ok = v.has_value();
  rec.slices = 1;
  rec.longest_slice_s = rec.end_s - rec.begin_s;  // all of it on the actor, between two requests
  for (auto& [name, rows] : s.embeddings) rec.rows += rows.size();
  auto floats = [](const auto& m) {
    std::uint64_t n = 0;
    for (auto& [name, v] : m) n += v.size();
    return n;
  };
  auto row_floats = [](const auto& m) {
    std::uint64_t n = 0;
    for (auto& [name, t] : m)
      for (auto& [id, r] : t) n += r.size();
    return n;
  };
  rec.bytes = 4 * (floats(s.dense) + floats(s.dense_slots) + row_floats(s.embeddings) +
                   row_floats(s.embedding_slots));
  log_ps_checkpoint(rec);
  if (!v) {
    if (!storage::is_disk_fault(v.err())) {
      spdlog::error("ps-{}: checkpoint failed: {}", st.index, v.err().to_string());
      return;
    }
    if (auto text = v.err().to_string(); text != st.fault) {
      spdlog::error("ps-{}: checkpoint: {}: the job pauses until it can be written", st.index, text);
      st.fault = text;
    }
    report_fault(st);  // with every failed try: a master started since hears it too
    return;
  }
  if (!st.fault.empty()) {
    spdlog::info("ps-{}: checkpoints are written again", st.index);
    st.fault.clear();
    report_fault(st);
  }
  st.has_checkpoint = true;
  st.since_full = full ? 0 : st.since_full + 1;
  st.applied_at_checkpoint = st.version;
  for (auto& [name, t] : st.tables) t.dirty.clear();
  if (full && st.timeline) st.timeline->checkpoint(st.rt->who().id.to_string(), *v, full);
  if (st.checkpoints_written++ == 0)
    spdlog::info("ps-{}: first checkpoint of this incarnation: version {} ({})", st.index, *v,
                 full ? "full" : "incremental");
  else
    spdlog::debug("ps-{}: checkpoint {} ({})", st.index, *v, full ? "full" : "incremental");
}

}  // namespace troupe::actors
