#include <spdlog/spdlog.h>

#include <algorithm>

#include "ps_state.hpp"
#include "troupe/actors/backends.hpp"
#include "troupe/actors/ps_checkpoint_log.hpp"
#include "troupe/job/data.hpp"
#include "troupe/model/state.hpp"
#include "troupe/storage/disk_fault.hpp"
#include "troupe/wire/messages.hpp"
#include "troupe/wire/ps_layout.hpp"

namespace troupe::actors {

namespace {

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

// Why this shard's own checkpoint does not fit the job's model ("" when it does): a job file edited
// before --resume ([model], ps.shards) made the restore skip what no longer fit, silently (a resumed
// job trained on from initial values and finished "ok").
std::string checkpoint_misfit(const ps_state& st, const storage::shard_state& s) {
  for (const auto& [name, d] : st.dense) {
    auto v = s.dense.find(name);
    if (v == s.dense.end()) return "it has no tensor '" + name + "', which this shard holds";
    if (v->second.size() != d.param->value.size())
      return "tensor '" + name + "' has " + std::to_string(v->second.size()) + " values, the model's " +
             std::to_string(d.param->value.size());
  }
  for (const auto& [name, v] : s.dense)
    if (!st.dense.count(name)) return "it holds tensor '" + name + "', which is not this shard's";
  for (const auto& [name, rows] : s.embeddings) {
    auto t = st.tables.find(name);
    if (t == st.tables.end()) return "it holds embedding table '" + name + "', which the model has not";
    for (const auto& [id, r] : rows)
      if (r.size() != t->second.table->dim())
        return "table '" + name + "' has rows of " + std::to_string(r.size()) + " floats, the model's " +
               std::to_string(t->second.table->dim());
  }
  return "";
}

// [model] init, for a shard without a checkpoint of its own: its dense tensors and its rows (by
// id) of the state the runner wrote into the job directory.
void start_from_init(ps_state& st, const std::string& dir) {
  auto init = model::read_state(dir);
  if (!init) throw std::runtime_error(init.err().to_string());
  if (!*init) return;
  storage::shard_state mine;
  for (auto& [name, values] : (*init)->state.dense)
    if (st.dense.count(name)) mine.dense.emplace(name, std::move(values));
  std::size_t rows = 0;
  for (auto& [table, all] : (*init)->state.embeddings)
    for (auto& [id, row] : all)
      if (wire::shard_of_id(id, st.shards) == st.index) {
        mine.embeddings[table].emplace(id, std::move(row));
        ++rows;
      }
  restore(st, mine);
  spdlog::info("ps-{}: starts from {} ({} dense tensors, {} rows)", st.index, (*init)->meta.writer,
               mine.dense.size(), rows);
}

// [train] noise_scale: the estimate from the pushes over the shard's dense tensors; M0 as the
// workers' (the job file's workers x batch_size). A pair in noise_scale_every x workers pushes: as
// many estimates per sample as a ring of that many computes (one per noise_scale_every rounds of a
// batch each), and a cost per push that falls as the workers, and so the shard's load, grow.
void start_noise(ps_state& st) {
  const auto& spec = st.node->spec();
  if (!spec.nn.train.noise_scale) return;
  std::map<std::string, std::size_t> sizes;
  for (const auto& [name, d] : st.dense) sizes[name] = d.param->value.size();
  const std::uint32_t workers = std::max<std::uint32_t>(1, spec.job.workers);
  const double m0 = static_cast<double>(workers) * spec.nn.train.batch_size;
  st.noise.emplace(sizes, m0, spec.nn.train.noise_scale_every * workers, spec.nn.train.optimizer);
}

// The estimate the checkpoint kept (push_noise::state()), when [train] noise_scale is on: the
// restarted shard's replies carry it at once, and the worker's sum over the shards goes on.
void restore_noise(ps_state& st, const storage::shard_state& s) {
  if (!st.noise) return;
  auto kept = s.dense_slots.find(push_noise::checkpoint_key);
  if (kept == s.dense_slots.end()) return;  // written without noise_scale, or by an older build
  if (!st.noise->restore(kept->second)) {
    spdlog::warn(
        "ps-{}: the noise-scale estimate in its checkpoint is not this job's ({} floats); "
        "it starts over",
        st.index, kept->second.size());
    return;
  }
  spdlog::info("ps-{}: noise-scale estimate restored ({} pairs)", st.index, st.noise->report().rounds);
}

// The shard's own latest checkpoint, `version`, restored; one that does not fit the model is refused.
void restore_checkpoint(ps_state& st, std::uint64_t version) {
  auto s = st.store->load(version);
  if (!s) throw std::runtime_error(s.err().to_string());
  if (auto misfit = checkpoint_misfit(st, *s); !misfit.empty())
    throw std::runtime_error("ps-" + std::to_string(st.index) + ": checkpoint " + std::to_string(version) +
                             " does not fit this job's model: " + misfit +
                             " (were [model] or ps.shards changed in job.toml since it was written?)");
  restore(st, *s);
  st.has_checkpoint = true;
  st.checkpoint_version = version;
  spdlog::info("ps-{}: restored checkpoint {}", st.index, version);
  restore_noise(st, *s);
}

// The data's id space: fields x buckets_per_field (0: unbounded, or past 2^64).
std::uint64_t id_space(const nn::dataset_info& info) {
  if (info.buckets_per_field == 0 || info.sparse_fields > UINT64_MAX / info.buckets_per_field) return 0;
  return info.sparse_fields * info.buckets_per_field;
}
}  // namespace

void init_shard(ps_state& st, node_context* node, const data_paths& data) {
  st.node = node;
  st.index = static_cast<std::uint32_t>(node->who().index);
  st.shards = node->spec().ps.shards;
  st.timeline = std::make_shared<observe::job_timeline>(node->who().job_dir);
  auto train = storage::record_store::open(data.train_dir);
  if (!train) throw std::runtime_error(train.err().to_string());
  const auto info = job::info_of(train->info(), train->dir());
  st.id_limit = id_space(info);
  auto m = make_host_backend(node->spec(), info);
  if (!m) throw std::runtime_error(m.err().to_string());
  st.model = std::move(*m);
  auto opt = nn::make_optimizer(node->spec().nn.train.optimizer);
  if (!opt) throw std::runtime_error(opt.err().to_string());
  st.opt = std::move(*opt);
  for (auto* p : st.model->dense_parameters())
    if (wire::shard_of_name(p->name, st.shards) == st.index) st.dense[p->name].param = p;
  for (auto* t : st.model->embedding_tables()) st.tables.emplace(t->name(), owned_table(t, *st.opt));
  start_noise(st);
  auto store = storage::checkpoint_store::open(node->spec().ps.checkpoints_of(node->who().job_dir) + "/ps-" +
                                               std::to_string(st.index));
  if (!store) throw std::runtime_error(store.err().to_string());
  st.store = std::make_shared<storage::checkpoint_store>(std::move(*store));
  auto latest = st.store->latest();
  if (!latest) throw std::runtime_error(latest.err().to_string());
  if (*latest) {
    restore_checkpoint(st, **latest);
  } else {
    start_from_init(st, node->who().job_dir + "/checkpoints/init");
  }
  spdlog::info("ps-{}/{}: {} dense tensors, {} embedding tables", st.index, st.shards, st.dense.size(),
               st.tables.size());
}

namespace {
// One stretch of checkpoint work on the actor, from `wall0` / `cpu0` to now.
void add_slice(ps_checkpoint_record& r, double wall0, double cpu0) {
  const double wall = ps_checkpoint_clock() - wall0, cpu = ps_thread_cpu_clock() - cpu0;
  r.slices += 1;
  r.slices_cpu_s += cpu;
  r.longest_slice_s = std::max(r.longest_slice_s, wall);
  r.longest_slice_cpu_s = std::max(r.longest_slice_cpu_s, cpu);
  r.slices_over_1ms += wall > 1e-3 ? 1 : 0;
  r.slices_over_1ms_cpu += cpu > 1e-3 ? 1 : 0;
}

void report_fault(ps_state& st) {
  if (auto r = st.node->send("master", "master", wire::disk_fault("checkpoint", st.fault), "ps"); !r)
    spdlog::debug("ps-{}: disk fault report: {}", st.index, r.err().to_string());
}

// The copy is complete: its write goes to a thread of its own; `done` runs there when it returned.
void start_write(ps_state& st, std::function<void()> done) {
  st.record.snapshot_end_s = ps_checkpoint_clock();
  st.record.rows = st.snapshot->rows();
  st.record.bytes = st.snapshot->bytes();
  const auto kind =
      st.snapshot->full() ? storage::checkpoint_kind::full : storage::checkpoint_kind::incremental;
  // The buffers come back recycled, and nothing of the snapshot is freed on the actor's thread.
  st.writing = std::async(std::launch::async, [store = st.store, b = st.snapshot->take(), kind,
                                               done = std::move(done)]() mutable {
    auto v = store->write(b.state, kind);
    b.recycle();
    ps_state::written w{std::move(v), std::move(b)};
    if (done) done();
    return w;
  });
  st.snapshot.reset();
}
}  // namespace

bool begin_checkpoint(ps_state& st) {
  if (st.snapshot || st.writing.valid()) return false;  // the last one is still being taken or written
  if (st.version == st.applied_at_checkpoint && st.has_checkpoint) return false;
  const bool full =
      !st.has_checkpoint || st.next_full || st.since_full + 1 >= st.node->spec().ps.full_checkpoint_every;
  st.record = {};
  st.record.full = full;
  st.record.begin_s = ps_checkpoint_clock();
  const double cpu = ps_thread_cpu_clock();
  st.version_at_snapshot = st.version;
  st.snapshot.emplace(st.dense, st.tables, full, std::move(st.spare));
  if (st.noise) st.snapshot->add_dense_slot(push_noise::checkpoint_key, st.noise->state());
  add_slice(st.record, st.record.begin_s, cpu);
  return true;
}

bool copy_checkpoint_slice(ps_state& st, std::chrono::nanoseconds budget, std::function<void()> written) {
  if (!st.snapshot) return true;
  const double t0 = ps_checkpoint_clock(), cpu0 = ps_thread_cpu_clock();
  const bool done = st.snapshot->copy_some(budget);
  add_slice(st.record, t0, cpu0);
  if (done) start_write(st, std::move(written));
  return done;
}

namespace {

// A checkpoint not written: the next one is full (the rows this one took out of the dirty set are
// in no checkpoint); a disk fault is reported to the master, which pauses the job.
void checkpoint_failed(ps_state& st, const error& e) {
  st.next_full = true;
  if (!storage::is_disk_fault(e)) {
    spdlog::error("ps-{}: checkpoint failed: {}", st.index, e.to_string());
    return;
  }
  if (auto text = e.to_string(); text != st.fault) {
    spdlog::error("ps-{}: checkpoint: {}: the job pauses until it can be written", st.index, text);
    st.fault = text;
  }
  report_fault(st);  // with every failed try: a master started since hears it too
}

std::string checkpoint_cost(const ps_checkpoint_record& r) {
  return fmt::format(
      "{} rows, {:.1f} MB; copied in {:.1f} ms ({} slices, longest {:.3f} ms), written in {:.1f} ms", r.rows,
      static_cast<double>(r.bytes) / 1e6, (r.snapshot_end_s - r.begin_s) * 1e3, r.slices,
      r.longest_slice_s * 1e3, (r.end_s - r.snapshot_end_s) * 1e3);
}

}  // namespace

void finish_checkpoint(ps_state& st) {
  if (!st.writing.valid()) return;
  // A slice too: taking the result back (the snapshot's memory used to be freed here).
  const double t0 = ps_checkpoint_clock(), cpu0 = ps_thread_cpu_clock();
  auto w = st.writing.get();
  st.spare = std::move(w.buffers);
  auto& v = w.version;
  add_slice(st.record, t0, cpu0);
  st.record.end_s = ps_checkpoint_clock();
  st.record.ok = v.has_value();
  log_ps_checkpoint(st.record);
  const bool full = st.record.full;
  if (!v) {
    checkpoint_failed(st, v.err());
    return;
  }
  if (!st.fault.empty()) {
    spdlog::info("ps-{}: checkpoints are written again", st.index);
    st.fault.clear();
    report_fault(st);
  }
  st.has_checkpoint = true;
  st.checkpoint_version = *v;
  st.next_full = false;
  st.since_full = full ? 0 : st.since_full + 1;
  st.applied_at_checkpoint = st.version_at_snapshot;
  if (full && st.timeline) st.timeline->checkpoint(st.node->who().id.to_string(), *v, full);
  auto cost = checkpoint_cost(st.record);
  // Tests and scripts wait for "first checkpoint" in the shard's log.
  if (st.checkpoints_written++ == 0)
    spdlog::info("ps-{}: first checkpoint of this incarnation: version {} ({}): {}", st.index, *v,
                 full ? "full" : "incremental", cost);
  else
    spdlog::debug("ps-{}: checkpoint {} ({}): {}", st.index, *v, full ? "full" : "incremental", cost);
}

void checkpoint_now(ps_state& st) {
  if (st.writing.valid()) finish_checkpoint(st);
  // A snapshot in progress is finished as it is; then one more if pushes came since it began.
  for (int round = 0; round < 2; ++round) {
    if (!st.snapshot && !begin_checkpoint(st)) return;
    copy_checkpoint_slice(st, std::chrono::hours(1), {});
    finish_checkpoint(st);
    if (!st.record.ok) return;
  }
}

final_checkpoint_result final_checkpoint(ps_state& st) {
  checkpoint_now(st);
  final_checkpoint_result r;
  if (st.has_checkpoint && st.applied_at_checkpoint == st.version) {
    r.version = st.checkpoint_version;
    return r;
  }
  r.disk_fault = !st.fault.empty();
  r.error = "ps-" + std::to_string(st.index) + ": " +
            (r.disk_fault ? st.fault : std::string("its checkpoint could not be written (see its log)"));
  return r;
}

}  // namespace troupe::actors
